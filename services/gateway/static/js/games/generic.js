// Any trial without a page of its own: the observation as JSON; an action typed as JSON,
// or one button per symbol when the action is an Avro enum.
export function create(root, trial, act) {
  const me = trial.actors.find((a) => a.name === trial.actor) || trial.actors[0];
  const schema = trial.classes[me.class].action_schema;
  root.innerHTML = `<pre id="generic-observation">waiting…</pre><div class="moves" id="generic-actions"></div>`;
  const actions = root.querySelector("#generic-actions");
  if (schema.type === "enum") {
    for (const symbol of schema.symbols) {
      const b = document.createElement("button");
      b.textContent = symbol;
      b.addEventListener("click", () => act(symbol));
      actions.append(b);
    }
  } else {
    actions.innerHTML = `<input id="generic-action" size="40" placeholder='action as JSON, e.g. 3'><button>send</button>`;
    actions.querySelector("button").addEventListener("click", () => act(JSON.parse(actions.querySelector("input").value)));
  }
  return {
    observation(msg) {
      root.querySelector("#generic-observation").textContent = JSON.stringify(msg.observation, null, 1);
    },
    view(msg) {
      root.querySelector("#generic-observation").textContent = JSON.stringify(msg.view, null, 1);
    },
  };
}
