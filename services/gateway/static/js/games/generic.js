// Any trial without a page of its own: the observation (or the view) as JSON, and a control
// built from the class's action schema — one button per symbol for an enum; otherwise a form
// and a send button: a number input for int/long/float/double (bounded by the schema's
// trialog.space when it gives bounds), a checkbox for a boolean, one field per member of a
// record, a row of number inputs for a fixed-length array or tensor. Anything else is typed
// as JSON. The gateway checks the action against the schema before writing it.
const NUMBERS = new Set(["int", "long", "float", "double"]);
const SPACE = "trialog.space";

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
    const form = control(schema, null, "action");
    const send = document.createElement("button");
    send.id = "generic-send";
    send.textContent = "send";
    send.addEventListener("click", () => {
      try {
        act(form.value());
      } catch (err) {
        root.querySelector("#generic-observation").textContent = `not sent: ${err.message}`;
      }
    });
    actions.append(form.el, send);
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

// A control for one schema: {el, value()}. `space` is the description an enclosing record's
// trialog.space gives this member (a schema's own trialog.space wins).
function control(schema, space, name) {
  if (typeof schema === "object" && schema !== null && !Array.isArray(schema)) {
    space = schema[SPACE] || space;
    const kind = schema.type;
    if (/^(trialog\.)?Tensor$/.test(schema.name || "")) return row(space, name, null);
    if (kind === "record") return record(schema, space, name);
    if (kind === "array" && NUMBERS.has(typeOf(schema.items))) return row(space, name, typeOf(schema.items));
    if (kind === "enum") return choice(schema.symbols, name);
    if (typeof kind === "string" || (typeof kind === "object" && !Array.isArray(kind))) {
      return control(kind, space, name);
    }
  }
  if (NUMBERS.has(schema)) return numberInput(space, name, schema);
  if (schema === "boolean") return checkbox(name);
  if (schema === "trialog.Tensor") return row(space, name, null);
  return json(name);
}

function typeOf(schema) {
  return typeof schema === "object" && schema !== null ? schema.type : schema;
}

function record(schema, space, name) {
  const box = document.createElement("fieldset");
  box.className = "generic-record";
  box.dataset.field = name;
  const members = (schema.fields || []).map((f) => {
    const sub = space?.type === "Dict" ? (space.fields || []).find((s) => s.name === f.name)?.space : null;
    const c = control(f.type, sub, f.name);
    const label = document.createElement("label");
    label.append(`${f.name} `, c.el);
    box.append(label);
    return [f.name, c];
  });
  return { el: box, value: () => Object.fromEntries(members.map(([n, c]) => [n, c.value()])) };
}

// Bounds a space gives one number (element i of an array): Discrete's start..start+n-1,
// Box's low/high (a number, or nested lists of them; null is unbounded), MultiDiscrete's nvec.
function bounds(space, i) {
  const at = (v) => (Array.isArray(v) ? at(v.flat(Infinity)[i] ?? null) : v);
  switch (space?.type) {
    case "Discrete":
      return { min: space.start ?? 0, max: (space.start ?? 0) + space.n - 1, integer: true };
    case "Box":
      return { min: at(space.low), max: at(space.high), integer: !/float/.test(space.dtype || "float") };
    case "MultiDiscrete": {
      const start = at(space.start ?? 0) ?? 0;
      return { min: start, max: start + at(space.nvec) - 1, integer: true };
    }
    case "MultiBinary":
      return { min: 0, max: 1, integer: true };
    default:
      return {};
  }
}

function length(space) {
  const shape = space?.shape || (space?.nvec && [space.nvec.length]);
  return Array.isArray(shape) && shape.length === 1 ? shape[0] : 0;
}

function numberInput(space, name, type, i = 0) {
  const input = document.createElement("input");
  input.type = "number";
  input.dataset.field = name;
  const b = bounds(space, i);
  const integer = b.integer ?? (type === "int" || type === "long");
  input.step = integer ? "1" : "any";
  if (b.min !== undefined && b.min !== null) input.min = b.min;
  if (b.max !== undefined && b.max !== null) input.max = b.max;
  input.value = b.min ?? 0;
  const value = () => {
    const v = Number(input.value);
    if (input.value === "" || !Number.isFinite(v)) throw new Error(`${name}: a number, please`);
    if (integer && !Number.isInteger(v)) throw new Error(`${name}: a whole number, please`);
    if ((input.min !== "" && v < Number(input.min)) || (input.max !== "" && v > Number(input.max))) {
      throw new Error(`${name}: from ${input.min || "-∞"} to ${input.max || "∞"}`);
    }
    return v;
  };
  return { el: input, value };
}

function row(space, name, type) {
  const n = length(space);
  if (!n) return json(name);
  const box = document.createElement("span");
  box.className = "generic-row";
  box.dataset.field = name;
  const inputs = Array.from({ length: n }, (_, i) => numberInput(space, `${name}[${i}]`, type, i));
  box.append(...inputs.map((c) => c.el));
  return { el: box, value: () => inputs.map((c) => c.value()) };
}

function checkbox(name) {
  const input = document.createElement("input");
  input.type = "checkbox";
  input.dataset.field = name;
  return { el: input, value: () => input.checked };
}

function choice(symbols, name) {
  const select = document.createElement("select");
  select.dataset.field = name;
  select.append(...symbols.map((s) => new Option(s, s)));
  return { el: select, value: () => select.value };
}

function json(name) {
  const input = document.createElement("input");
  input.size = 30;
  input.dataset.field = name;
  input.placeholder = "as JSON, e.g. 3";
  return { el: input, value: () => JSON.parse(input.value) };
}
