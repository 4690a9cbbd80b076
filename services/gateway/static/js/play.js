// A seat: one person playing one client actor of a trial through the gateway's socket.
// The game's look lives in the operator's page for the environment (welcome.page, from the
// gateway's --pages folder), else ./games/<environment>.js, else generic.js.
import { connect, holderId } from "./socket.js";

const $ = (sel) => document.querySelector(sel);
const token = new URLSearchParams(location.search).get("token") || "";

// What tests and people can read: latency samples (action sent -> next observation drawn).
const stats = (window.trialog = { tick: null, waiting: null, latencies: [], actions: 0, ended: null, refused: null, score: 0 });

let game = null;
// The game's module loads while messages go on arriving: they reach it in order once it has.
let loaded = Promise.resolve();
const toGame = (draw) => loaded.then(() => game && draw(game));
let queued = null; // an action chosen before its observation arrived (real-time play)
let sentAt = null;

function status(text, cls = "") {
  $("#status").textContent = text;
  $("#status").className = cls;
}

function log(text) {
  const line = document.createElement("div");
  line.textContent = text;
  $("#log").prepend(line);
}

function act(action) {
  if (stats.waiting === null) {
    queued = action;
    return;
  }
  socket.send({ type: "action", tick: stats.waiting, action });
  sentAt = performance.now();
  stats.actions += 1;
  stats.waiting = null;
  queued = null;
}

async function loadGame(welcome) {
  let module;
  try {
    module = await import(welcome.page || `./games/${welcome.environment}.js`);
  } catch (err) {
    if (welcome.page) log(`the page ${welcome.page} failed to load (${err}): the generic page draws the trial`);
    module = await import("./games/generic.js");
  }
  return module.create($("#game"), welcome, act);
}

const handlers = {
  async welcome(msg) {
    $("#title").textContent = `You are ${msg.actor} in ${msg.spec} (${msg.trial})`;
    status("playing");
    loaded = loadGame(msg).then((g) => (game = g));
    await loaded;
  },
  observation(msg) {
    stats.tick = msg.tick;
    $("#tick").textContent = msg.tick;
    toGame((g) => g.observation(msg));
    if (sentAt !== null) {
      const ms = performance.now() - sentAt;
      stats.latencies.push(ms);
      $("#latency").textContent = ms.toFixed(0);
      sentAt = null;
    }
    if (!msg.final) {
      stats.waiting = msg.tick;
      if (queued !== null) act(queued);
    }
  },
  view(msg) {
    toGame((g) => g.view?.(msg));
  },
  reward(msg) {
    stats.score += msg.value;
    $("#score").textContent = stats.score.toFixed(1);
    if (msg.value !== 0) log(`tick ${msg.tick}: reward ${msg.value} from ${msg.sender}`);
  },
  message(msg) {
    log(`tick ${msg.tick}: ${msg.sender} says ${JSON.stringify(msg.payload)}`);
  },
  timeout(msg) {
    log(`tick ${msg.tick}: no action in time, played the default (${msg.policy})`);
    if (stats.waiting === msg.tick) stats.waiting = null;
  },
  end(msg) {
    stats.ended = msg.reason;
    stats.waiting = null;
    status(`trial over: ${msg.reason} at tick ${msg.tick}`, "ended");
    toGame((g) => g.end?.(msg));
  },
  refused(msg) {
    stats.refused = msg.reason;
    status(msg.reason, "refused");
    if (msg.held) offerTakeover();
  },
  replaced(msg) {
    stats.refused = msg.reason;
    status(msg.reason, "refused");
    offerTakeover();
  },
  error(msg) {
    log(`error: ${msg.reason}`);
  },
};

function offerTakeover() {
  // The seat is another page's (another browser, or this one's other tab): play here instead?
  const b = document.createElement("button");
  b.id = "take-over";
  b.textContent = "Take the seat over";
  b.addEventListener("click", () => {
    b.remove();
    stats.refused = null;
    socket.close();
    socket = open(true);
  });
  $("#status").after(b);
}

function open(takeover = false) {
  const path = `/ws/seat?token=${encodeURIComponent(token)}&holder=${holderId()}${takeover ? "&takeover=1" : ""}`;
  return connect(path, handlers, {
    onClose: () => {
      if (!stats.ended && !stats.refused) status("connection lost — reconnecting…", "refused");
    },
    reconnect: () => !stats.ended && !stats.refused,
  });
}

let socket = open();
