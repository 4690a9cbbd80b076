// Overcooked (CoGrid): the kitchen drawn on a canvas from the environment's view
// (trialog/adapters/views.py), not from pixels. Arrow keys move; space or enter
// interacts (pick up, put down, serve).
const TILE = 72;
const KEYS = { ArrowUp: 0, ArrowDown: 1, ArrowLeft: 2, ArrowRight: 3, " ": 4, Enter: 4 };
const STEP = [[0, 1], [1, 0], [0, -1], [-1, 0]]; // CoGrid directions: right, down, left, up
const FLOOR = "#efe9dc";
const COOK_COLOURS = ["#2563eb", "#dc2626", "#7c3aed", "#0d9488"];
const TILES = {
  C: { fill: "#c49a6c", label: "" },
  P: { fill: "#4b5563", label: "" },
  O: { fill: "#c49a6c", label: "onions" },
  T: { fill: "#c49a6c", label: "tomatoes" },
  D: { fill: "#c49a6c", label: "plates" },
  S: { fill: "#86c98d", label: "serve" },
  W: { fill: "#6b7280", label: "" },
};
const ITEM_COLOURS = { onion: "#f5c542", tomato: "#e0483c", plate: "#ffffff", onion_soup: "#f59e0b", tomato_soup: "#dc2626" };

function item(ctx, name, x, y, size) {
  ctx.beginPath();
  ctx.arc(x, y, size, 0, 2 * Math.PI);
  ctx.fillStyle = name.endsWith("soup") ? "#ffffff" : ITEM_COLOURS[name] || "#999";
  ctx.fill();
  ctx.strokeStyle = "#555";
  ctx.lineWidth = 1.5;
  ctx.stroke();
  if (name.endsWith("soup")) {
    ctx.beginPath();
    ctx.arc(x, y, size * 0.65, 0, 2 * Math.PI);
    ctx.fillStyle = ITEM_COLOURS[name];
    ctx.fill();
  }
}

export function draw(canvas, view, me) {
  const rows = view.tiles.length;
  const cols = view.tiles[0].length;
  canvas.width = cols * TILE;
  canvas.height = rows * TILE;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = FLOOR;
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.font = "12px system-ui, sans-serif";
  ctx.textAlign = "center";
  view.tiles.forEach((line, r) => {
    [...line].forEach((ch, c) => {
      const t = TILES[ch];
      if (!t) return;
      ctx.fillStyle = t.fill;
      ctx.fillRect(c * TILE + 1, r * TILE + 1, TILE - 2, TILE - 2);
      const cx = c * TILE + TILE / 2;
      const cy = r * TILE + TILE / 2;
      if (ch === "O" || ch === "T" || ch === "D") {
        const name = { O: "onion", T: "tomato", D: "plate" }[ch];
        [[-10, -6], [10, -6], [0, 8]].forEach(([dx, dy]) => item(ctx, name, cx + dx, cy + dy, 9));
      }
      if (t.label) {
        ctx.fillStyle = "#1f2937";
        ctx.fillText(t.label, cx, r * TILE + TILE - 6);
      }
    });
  });
  for (const pot of view.pots) {
    const cx = pot.c * TILE + TILE / 2;
    const cy = pot.r * TILE + TILE / 2;
    ctx.beginPath();
    ctx.arc(cx, cy, TILE * 0.36, 0, 2 * Math.PI);
    ctx.fillStyle = pot.ready ? "#16a34a" : pot.cooking ? "#ea580c" : "#111827";
    ctx.fill();
    for (let i = 0; i < pot.onions; i++) item(ctx, "onion", cx - 14 + i * 14, cy - 4, 6);
    for (let i = 0; i < pot.tomatoes; i++) item(ctx, "tomato", cx - 14 + (pot.onions + i) * 14, cy - 4, 6);
    ctx.fillStyle = "#fff";
    ctx.fillText(pot.ready ? "ready!" : pot.cooking ? `${pot.timer}` : `${pot.onions + pot.tomatoes}/3`, cx, cy + 16);
  }
  for (const [r, c, name] of view.items) item(ctx, name, c * TILE + TILE / 2, r * TILE + TILE / 2, 11);
  view.cooks.forEach((cook, i) => {
    const cx = cook.c * TILE + TILE / 2;
    const cy = cook.r * TILE + TILE / 2;
    const mine = cook.actor === me;
    ctx.beginPath();
    ctx.arc(cx, cy, TILE * 0.3, 0, 2 * Math.PI);
    // A player sees themself in blue; a watcher sees each cook in its own colour.
    ctx.fillStyle = mine ? "#2563eb" : me === null ? COOK_COLOURS[i % COOK_COLOURS.length] : "#dc2626";
    ctx.fill();
    const [dy, dx] = STEP[cook.dir] || [0, 0];
    ctx.beginPath();
    ctx.moveTo(cx + dx * TILE * 0.45, cy + dy * TILE * 0.45);
    ctx.lineTo(cx + dy * 10 + dx * TILE * 0.25, cy + dx * 10 + dy * TILE * 0.25);
    ctx.lineTo(cx - dy * 10 + dx * TILE * 0.25, cy - dx * 10 + dy * TILE * 0.25);
    ctx.closePath();
    ctx.fill();
    ctx.fillStyle = "#fff";
    ctx.fillText(mine ? "you" : cook.actor, cx, cy + 4);
    if (cook.holding) item(ctx, cook.holding, cx + 14, cy - 14, 8);
  });
}

export function create(root, trial, act) {
  root.innerHTML = `<canvas id="kitchen" tabindex="0"></canvas>
    <p class="muted">You are <b>${trial.actor}</b> (blue). Arrow keys move; space or enter picks up, puts down and serves.
    Bring three onions to the pot, then a plate to the cooked soup, then the soup to the serving counter.
    One step every ${trial.tick_interval_ms ?? "–"} ms: no key, no move.</p>`;
  const canvas = root.querySelector("#kitchen");
  document.addEventListener("keydown", (e) => {
    if (e.key in KEYS) {
      e.preventDefault();
      act(KEYS[e.key]);
    }
  });
  return {
    observation() {},
    view(msg) {
      draw(canvas, msg.view, trial.actor);
    },
  };
}

export function watcher(root) {
  root.innerHTML = `<canvas id="kitchen"></canvas>`;
  const canvas = root.querySelector("#kitchen");
  return { drawView: (view) => draw(canvas, view, null) };
}
