// The lobby: specs offering seats, trials waiting for people, every trial to watch.
const $ = (sel) => document.querySelector(sel);

function cell(row, content) {
  const td = row.insertCell();
  if (content instanceof Node) td.append(content); else td.textContent = content ?? "";
  return td;
}

function button(label, onClick, cls = "") {
  const b = document.createElement("button");
  b.textContent = label;
  b.className = cls;
  b.addEventListener("click", onClick);
  return b;
}

async function post(url, body) {
  const response = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

async function go(url, body) {
  try {
    location.href = (await post(url, body)).url;
  } catch (err) {
    alert(err.message);
  }
}

function fill(lobby) {
  const specs = $("#specs tbody");
  specs.replaceChildren();
  for (const spec of lobby.specs) {
    for (const seat of spec.seats) {
      const row = specs.insertRow();
      cell(row, spec.spec);
      cell(row, `${seat.actor} (${seat.class})`);
      cell(row, Object.entries(seat.partners).map(([a, impl]) => `${a}: ${impl}`).join(", "));
      cell(row, button(`Play as ${seat.actor}`, () => go("/api/trials", { spec: spec.spec, actor: seat.actor })));
    }
  }
  $("#no-specs").hidden = lobby.specs.length > 0;

  const waiting = $("#waiting tbody");
  waiting.replaceChildren();
  const pending = lobby.trials.filter((t) => t.status === "pending" && t.seats.length);
  for (const t of pending) {
    const row = waiting.insertRow();
    row.dataset.trial = t.trial;
    cell(row, t.trial);
    cell(row, t.spec);
    const seats = cell(row, "");
    for (const actor of t.seats) seats.append(button(`Take seat ${actor}`, () => go("/api/seat", { trial: t.trial, actor }), "take-seat"), " ");
  }
  $("#none-waiting").hidden = pending.length > 0;

  const trials = $("#trials tbody");
  trials.replaceChildren();
  for (const t of lobby.trials.slice(0, 50)) {
    const row = trials.insertRow();
    cell(row, t.trial);
    cell(row, t.spec);
    cell(row, t.status + (t.reason ? ` (${t.reason})` : ""));
    cell(row, t.ticks);
    const a = document.createElement("a");
    a.href = `/watch/${encodeURIComponent(t.trial)}`;
    a.textContent = t.status === "ended" ? "replay & judge" : "watch & judge";
    cell(row, a);
  }
}

async function refresh() {
  try {
    fill(await (await fetch("/api/lobby")).json());
  } catch (err) {
    console.warn("lobby refresh failed", err);
  }
}

refresh();
setInterval(refresh, 2000);
