// Tug of war (docs/tutorial.md): the rope, both players' stamina, and four buttons to pull
// (or the keys 0 to 3). The gateway serves it because the spec names it (page: rope.js).
const LINE = 3;

export function create(root, trial, act) {
  const me = trial.actor;
  root.innerHTML = `
    <p id="tug-status" class="muted">waiting for the first pull…</p>
    <div id="tug-rope" style="display:flex;gap:4px;font:20px monospace;margin:12px 0"></div>
    <div class="moves">${[0, 1, 2, 3]
      .map((n) => `<button data-pull="${n}" disabled>${n ? `pull ${n}` : "rest"}</button>`)
      .join("")}</div>
    <p class="stats"><span>your stamina <b id="tug-mine">–</b></span>
      <span>theirs <b id="tug-theirs">–</b></span><span>last pulls <b id="tug-last">–</b></span></p>`;
  const buttons = [...root.querySelectorAll("button[data-pull]")];
  const pull = (n) => {
    buttons.forEach((b) => (b.disabled = true));
    act(n);
  };
  buttons.forEach((b) => b.addEventListener("click", () => pull(Number(b.dataset.pull))));
  document.addEventListener("keydown", (e) => {
    if (/^[0-3]$/.test(e.key) && !buttons[0].disabled) pull(Number(e.key));
  });

  function draw(view) {
    const [first, second] = view.players;
    const other = me === first ? second : first;
    const knot = me === first ? view.knot : -view.knot; // positive: my way, drawn on the left
    const cells = [];
    for (let at = LINE; at >= -LINE; at--) {
      const mark = at === knot ? "●" : Math.abs(at) === LINE ? "|" : "─";
      cells.push(`<span data-at="${at}" style="width:1.5em;text-align:center">${mark}</span>`);
    }
    const mine = trial.watching ? me : "you";
    root.querySelector("#tug-rope").innerHTML = `<b>${mine}</b>${cells.join("")}<b>${other}</b>`;
    root.querySelector("#tug-mine").textContent = view.stamina[me];
    root.querySelector("#tug-theirs").textContent = view.stamina[other];
    root.querySelector("#tug-last").textContent = `you ${view.pulls[me]}, ${other} ${view.pulls[other]}`;
    return knot;
  }

  let knot = 0;
  return {
    observation(msg) {
      // The trial has a view: the observation itself stays in the log (msg.observation is null).
      buttons.forEach((b) => (b.disabled = msg.final));
      if (!msg.final) root.querySelector("#tug-status").textContent = `tick ${msg.tick}: how hard do you pull?`;
    },
    view(msg) {
      knot = draw(msg.view);
    },
    end(msg) {
      buttons.forEach((b) => (b.disabled = true));
      const verdict = knot >= LINE ? "you won!" : knot <= -LINE ? "they won" : `no winner (${msg.reason})`;
      root.querySelector("#tug-status").textContent = `game over: ${verdict}`;
    },
  };
}

// The watch page draws the rope from the first player's side.
export function watcher(root, trial) {
  const seat = { ...trial, actor: trial.actors[0].name, watching: true };
  const page = create(root, seat, () => {});
  return { drawView: (view) => page.view({ view }) };
}
