// The JSON WebSocket every page uses: one handler per message type, reconnects with
// backoff (the gateway resumes a seat from the log, on any instance).

export function holderId() {
  // Who holds a seat: kept in this browser, so a reload or reconnect is the same holder.
  let id = localStorage.getItem("trialog.holder");
  if (!id) {
    id = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
    localStorage.setItem("trialog.holder", id);
  }
  return id;
}

export function connect(path, handlers, { onClose = () => {}, reconnect = () => false } = {}) {
  let ws = null;
  let delay = 250;
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
  const socket = {
    send(message) {
      if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
    },
    close() {
      reconnect = () => false;
      ws?.close();
    },
  };
  function open() {
    ws = new WebSocket(url);
    socket.ws = ws;
    ws.onopen = () => (delay = 250);
    ws.onmessage = (e) => {
      const msg = JSON.parse(e.data);
      const handle = handlers[msg.type];
      if (handle) handle(msg);
    };
    ws.onclose = () => {
      onClose();
      if (reconnect()) {
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 4000);
      }
    };
  }
  open();
  return socket;
}
