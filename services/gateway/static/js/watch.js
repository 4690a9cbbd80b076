// Watch & judge: follow a trial (history from the log, then live), step back through its
// ticks, and reward an actor for the shown tick — retroactively when it is in the past.
import { connect } from "./socket.js";

const $ = (sel) => document.querySelector(sel);
const trialId = decodeURIComponent(location.pathname.split("/").pop());
const frames = new Map(); // tick -> {views, observations: {actor: obs}, actions: {actor: action}, rewards: []}
const stats = (window.trialog = { trial: null, tick: 0, live: false, ended: null, rewarded: [], errors: [] });
let follow = true; // the timeline follows the newest tick until the person drags it
let look = null;

function frame(tick) {
  if (!frames.has(tick)) frames.set(tick, { view: null, observations: {}, actions: {}, rewards: [] });
  return frames.get(tick);
}

function shownTick() {
  return Number($("#timeline").value);
}

function render() {
  const tick = shownTick();
  $("#shown").textContent = tick;
  $("#judge-tick").textContent = tick;
  const f = frames.get(tick);
  if (!f) return;
  if (look?.drawView && f.view) look.drawView(f.view);
  else $("#picture").innerHTML = `<pre>${JSON.stringify(f.view ?? f.observations, null, 1)}</pre>`;
  const rows = $("#tick-table tbody");
  rows.replaceChildren();
  for (const a of stats.trial?.actors ?? []) {
    const row = rows.insertRow();
    row.insertCell().textContent = `${a.name} (${a.implementation})`;
    row.insertCell().textContent = JSON.stringify(f.actions[a.name] ?? "–");
    row.insertCell().textContent = f.rewards.filter((r) => r.receiver === a.name || r.receiver === "*").map((r) => `${r.value} by ${r.sender}`).join(", ");
  }
}

function advance(tick) {
  if (tick > stats.tick) stats.tick = tick;
  $("#tick").textContent = stats.tick;
  $("#timeline").max = stats.tick;
  if (follow) $("#timeline").value = stats.tick;
  render();
}

const handlers = {
  async trial(msg) {
    stats.trial = msg;
    $("#title").textContent = `${msg.spec}: ${msg.trial}`;
    $("#judge-actor").replaceChildren(...msg.actors.map((a) => new Option(`${a.name} (${a.implementation})`, a.name)));
    try {
      const module = await import(msg.page || `./games/${msg.environment}.js`);
      if (module.watcher) look = module.watcher($("#picture"), msg);
    } catch {
      look = null;
    }
    // The history goes on arriving while the module loads (an ended trial's may all be in by
    // then): draw the shown tick with the page's look now, not at the next message.
    render();
  },
  observation(msg) {
    frame(msg.tick).observations[msg.actor] = msg.observation;
    advance(msg.tick);
  },
  view(msg) {
    frame(msg.tick).view = msg.view;
    advance(msg.tick);
  },
  action(msg) {
    frame(msg.tick).actions[msg.actor] = msg.action;
    if (msg.tick === shownTick()) render();
  },
  reward(msg) {
    frame(msg.tick).rewards.push(msg);
    if (msg.tick === shownTick()) render();
  },
  live() {
    stats.live = true;
    $("#status").textContent = stats.ended ? `ended (${stats.ended}) — replaying from the log` : "live";
  },
  end(msg) {
    stats.ended = msg.reason;
    $("#status").textContent = `ended: ${msg.reason} at tick ${msg.tick}`;
  },
  rewarded(msg) {
    stats.rewarded.push(msg);
    $("#judge-result").textContent = `sent: ${msg.value > 0 ? "good" : "bad"} to ${msg.receiver} for tick ${msg.tick}`;
  },
  error(msg) {
    stats.errors.push(msg.reason);
    $("#judge-result").textContent = msg.reason;
  },
  refused(msg) {
    stats.errors.push(msg.reason);
    $("#status").textContent = msg.reason;
  },
};

const socket = connect(`/ws/watch/${encodeURIComponent(trialId)}`, handlers);

$("#timeline").addEventListener("input", () => {
  follow = shownTick() >= stats.tick;
  render();
});
$("#judge-confidence").addEventListener("input", () => ($("#confidence-value").textContent = Number($("#judge-confidence").value).toFixed(1)));
function judge(value) {
  socket.send({
    type: "reward", judge: $("#judge-name").value.trim(), receiver: $("#judge-actor").value,
    tick: shownTick(), value, confidence: Number($("#judge-confidence").value),
  });
}
$("#thumbs-up").addEventListener("click", () => judge(1));
$("#thumbs-down").addEventListener("click", () => judge(-1));
