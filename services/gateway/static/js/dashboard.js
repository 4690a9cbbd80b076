// The live dashboard: polls /api/dashboard every second and redraws.
// window.trialog publishes what the page shows (for people's consoles and the tests).

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"];
const $ = (id) => document.getElementById(id);
window.trialog = { updates: 0 };

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text ?? "";
  return td;
}

function fill(tableId, rows) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    tr.append(...cells.map(cell));
    return tr;
  }));
}

const num = (x, digits = 2) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

function rolling(values, window) {
  let total = 0;
  return values.map((v, i) => {
    total += v;
    if (i >= window) total -= values[i - window];
    return total / Math.min(i + 1, window);
  });
}

// Whose return the plot shows: an actor's (the first one by default: in a zero-sum game the
// sum over actors says nothing) or the sum over actors ("").
let chosen = null;
$("actor").addEventListener("change", (e) => { chosen = e.target.value; update(); });

function chooseActor(returns) {
  const actors = [...new Set(Object.values(returns).flat().flatMap((p) => Object.keys(p[2] || {})))].sort();
  const select = $("actor");
  for (const a of actors) {
    if (![...select.options].some((o) => o.value === a)) select.add(new Option(`return of ${a}`, a));
  }
  if (chosen === null && actors.length) chosen = actors[0];
  select.value = chosen ?? "";
  const pick = (p) => (chosen ? (p[2] || {})[chosen] ?? 0 : p[1]);
  return Object.fromEntries(Object.entries(returns).map(([k, series]) => [k, series.map((p) => [p[0], pick(p)])]));
}

function drawReturns(returns, window) {
  const canvas = $("returns");
  const ctx = canvas.getContext("2d");
  const { width, height } = canvas;
  const pad = { left: 56, right: 12, top: 12, bottom: 28 };
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  const all = Object.values(returns).flat();
  if (!all.length) return 0;
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x1 === x0) x1 = x0 + 1000;
  if (y1 === y0) { y0 -= 1; y1 += 1; }
  const X = (x) => pad.left + ((x - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const Y = (y) => height - pad.bottom - ((y - y0) / (y1 - y0)) * (height - pad.top - pad.bottom);
  ctx.strokeStyle = "#d8dde5";
  ctx.fillStyle = "#6b7280";
  ctx.font = "12px system-ui, sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    ctx.beginPath(); ctx.moveTo(pad.left, Y(y)); ctx.lineTo(width - pad.right, Y(y)); ctx.stroke();
    ctx.fillText(num(y, 1), 4, Y(y) + 4);
  }
  ctx.fillText(new Date(x0).toLocaleTimeString(), pad.left, height - 8);
  const last = new Date(x1).toLocaleTimeString();
  ctx.fillText(last, width - pad.right - ctx.measureText(last).width, height - 8);
  let points = 0;
  Object.entries(returns).sort().forEach(([pairing, series], i) => {
    const color = COLORS[i % COLORS.length];
    ctx.fillStyle = color;
    ctx.globalAlpha = 0.45;
    for (const [x, y] of series) { ctx.beginPath(); ctx.arc(X(x), Y(y), 3, 0, 2 * Math.PI); ctx.fill(); points++; }
    ctx.globalAlpha = 1;
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    rolling(series.map((p) => p[1]), window).forEach((y, j) => (j ? ctx.lineTo(X(series[j][0]), Y(y)) : ctx.moveTo(X(series[j][0]), Y(y))));
    ctx.stroke();
    ctx.lineWidth = 1;
    ctx.fillText(pairing, pad.left + 8, pad.top + 14 + 16 * i);
  });
  return points;
}

async function update() {
  let data;
  try {
    const response = await fetch("/api/dashboard", { cache: "no-store" });
    data = await response.json();
  } catch (error) {
    $("updated").textContent = `not updated: ${error}`;
    return;
  }
  const { trials, pairings, returns, environments, dead_letters: letters } = data;
  $("running").textContent = trials.running;
  $("ended").textContent = trials.ended;
  $("tps").textContent = num(data.ticks_per_s, 1);
  $("letters").textContent = letters.total;
  $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  const window_ = pairings.length ? pairings[0].window : 20;
  $("window").textContent = window_;
  $("no-analytics").hidden = data.analytics;
  const points = drawReturns(chooseActor(returns), window_);
  fill("pairings", pairings.map((p) => [p.key, p.trials, num(p.mean), num(p.rolling_mean),
    Object.entries(p.rolling_mean_by_actor || {}).map(([a, v]) => `${a} ${num(v)}`).join(", ")]));
  fill("trials", trials.recent.map((t) => [t.trial, t.spec, t.pairing, t.status, t.ticks, t.reason]));
  fill("environments", environments.map((e) => [e.key, e.trials, e.ticks, num(e.tick_ms_mean, 1), e.tick_ms_max ?? "–"]));
  fill("dead-letters", letters.recent.map((l) => [l.service, l.kind, l.trial_id, l.reason]));
  $("no-letters").hidden = letters.total > 0;
  Object.assign(window.trialog, {
    updates: window.trialog.updates + 1, running: trials.running, ended: trials.ended, ticks_per_s: data.ticks_per_s,
    pairings: pairings.length, points, dead_letters: letters.total, analytics: data.analytics, actor: chosen,
    pairing_trials: pairings.reduce((n, p) => n + p.trials, 0),
  });
}

update();
setInterval(update, 1000);
