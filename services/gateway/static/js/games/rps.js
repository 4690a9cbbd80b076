// Rock-paper-scissors: three buttons (or the keys R, P, S).
const MOVES = ["ROCK", "PAPER", "SCISSORS"];

export function create(root, trial, act) {
  root.innerHTML = `
    <p id="rps-round" class="muted">waiting for the first round…</p>
    <div class="moves">${MOVES.map((m) => `<button data-move="${m}" disabled>${m.toLowerCase()}</button>`).join("")}</div>
    <p class="stats"><span>you <b id="rps-me">0</b></span><span>them <b id="rps-them">0</b></span><span>their last move <b id="rps-last">–</b></span></p>`;
  const buttons = [...root.querySelectorAll("button[data-move]")];
  const choose = (move) => {
    buttons.forEach((b) => (b.disabled = true));
    act(move);
  };
  buttons.forEach((b) => b.addEventListener("click", () => choose(b.dataset.move)));
  document.addEventListener("keydown", (e) => {
    const move = { r: "ROCK", p: "PAPER", s: "SCISSORS" }[e.key.toLowerCase()];
    if (move && !buttons[0].disabled) choose(move);
  });
  return {
    observation(msg) {
      const o = msg.observation;
      root.querySelector("#rps-round").textContent = msg.final ? "game over" : `round ${o.round + 1}: your move`;
      root.querySelector("#rps-me").textContent = o.my_score;
      root.querySelector("#rps-them").textContent = o.their_score;
      root.querySelector("#rps-last").textContent = o.their_last_move ? o.their_last_move.toLowerCase() : "–";
      buttons.forEach((b) => (b.disabled = msg.final));
    },
    end() {
      buttons.forEach((b) => (b.disabled = true));
    },
  };
}
