// The queue page's script (queues.html): polls api/state every POLL_MS and, while a queue listing is
// open, api/ports/{port}/flowfiles; renders both with DOM calls and textContent only (attribute
// names and values, contents and peers come from clients: nothing is ever parsed as HTML).
"use strict";

(() => {
  const POLL_MS = 1500;
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let polls = 0;
  let listing = null; // {port, node} of the open listing
  let limits = {listing: 100};
  let inFlight = false;
  let lastState = null;
  let queuesDrawn = ""; // what the queue table shows: redrawn only when it changes (its buttons stay put)

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined) continue;
      if (key === "class") e.className = value;
      else if (key === "text") e.textContent = String(value);
      else e.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      e.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return e;
  }

  function bytes(n) {
    if (n < 1024) return `${n} B`;
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let value = n / 1024;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
  }

  function seconds(s) {
    if (s === null || s === undefined) return "";
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60);
    return `${m} min ${Math.floor(s - m * 60)} s`;
  }

  function clock(epoch) {
    return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
  }

  function shortId(id) {
    return el("span", {class: "mono", title: id}, String(id).slice(0, 8));
  }

  function setStatus(state, text) {
    const s = $("status");
    s.dataset.state = state;
    s.textContent = text;
  }

  async function getJSON(url) {
    const answer = await fetch(url, {cache: "no-store", headers: {Accept: "application/json"}});
    const text = await answer.text();
    if (!answer.ok) {
      let message = text;
      try { message = JSON.parse(text).error || text; } catch (_) { /* a text answer (401/403) */ }
      throw new Error(`${answer.status}: ${message}`);
    }
    return JSON.parse(text);
  }

  // -- the state -------------------------------------------------------------------------------------

  function renderSummary(state) {
    $("served-by").textContent = `served by node ${state.servedBy}`;
    $("identity").textContent = state.secure ? `you are ${state.identity}` : "plain HTTP";
    $("ttl").textContent = `transaction TTL ${state.ttl} s`;
    $("updated").textContent = `updated ${clock(state.time)}`;
  }

  function renderNodes(state) {
    const rows = state.nodes.map((n) => el("tr", {"data-node": n.index},
      el("td", {}, `node ${n.index}`),
      el("td", {"data-field": "state"},
        el("span", {class: `badge ${n.alive ? "alive" : "down"}`}, n.alive ? "alive" : "stopped")),
      el("td", {class: "mono"}, n.url),
      el("td", {class: "num", "data-field": "queued"}, n.queued),
      el("td", {class: "num", "data-field": "queuedBytes", title: `${n.queuedBytes} bytes`}, bytes(n.queuedBytes)),
      el("td", {class: "num", "data-field": "heldForOthers"}, n.heldForOthers),
      el("td", {class: "num", "data-field": "openTransactions"},
        state.transactions.filter((t) => t.node === n.index).length)));
    $("nodes").tBodies[0].replaceChildren(...rows);
  }

  function renderQueues(state) {
    const drawn = JSON.stringify([state.ports, state.nodes.map((n) => [n.index, n.ports]), listing]);
    if (drawn === queuesDrawn) return;
    queuesDrawn = drawn;
    const head = el("tr", {}, el("th", {}, "port"), el("th", {}, "type"), el("th", {}, "routed to"),
      ...state.nodes.map((n) => el("th", {class: "num"}, `node ${n.index}`)), el("th", {class: "num"}, "total"));
    $("queues").tHead.replaceChildren(head);
    const rows = state.ports.map((p) => {
      let total = 0;
      let totalBytes = 0;
      const cells = state.nodes.map((n) => {
        const q = n.ports[p.name];
        if (!q) return el("td", {class: "num empty"}, "-");
        total += q.queued;
        totalBytes += q.queuedBytes;
        const open = listing && listing.port === p.name && listing.node === n.index;
        const button = el("button", {type: "button", "data-action": "list", title: "list this queue"}, "list");
        button.addEventListener("click", () => openListing(p.name, n.index));
        return el("td", {class: `num cell${open ? " open" : ""}`, "data-port": p.name, "data-node": n.index},
          el("span", {class: "queued", "data-field": "queued"}, q.queued), " ",
          el("span", {class: "bytes", "data-field": "queuedBytes", title: `${q.queuedBytes} bytes`},
            `(${bytes(q.queuedBytes)})`),
          q.state !== "RUNNING" ? el("span", {class: "badge stopped"}, q.state.toLowerCase()) : null,
          q.full ? el("span", {class: "badge full", title: `capacity ${q.capacity}`}, "full") : null,
          button);
      });
      return el("tr", {"data-port": p.name, class: listing && listing.port === p.name ? "selected" : null},
        el("td", {}, p.name), el("td", {}, p.type), el("td", {}, p.routeTo || ""), ...cells,
        el("td", {class: "num", "data-field": "total", title: `${totalBytes} bytes`}, total));
    });
    if (!rows.length) rows.push(el("tr", {}, el("td", {class: "empty", colspan: 4}, "no ports you may see")));
    $("queues").tBodies[0].replaceChildren(...rows);
  }

  function renderTransactions(state) {
    const rows = state.transactions.map((t) => el("tr", {"data-transaction": t.id},
      el("td", {}, shortId(t.id)), el("td", {}, t.node), el("td", {}, t.port), el("td", {}, t.direction),
      el("td", {}, t.state), el("td", {class: "num"}, t.flowFiles), el("td", {class: "num"}, bytes(t.bytes)),
      el("td", {class: "mono"}, t.peer),
      el("td", {class: "num", "data-field": "age"}, seconds(t.ageSeconds)),
      el("td", {class: "num"}, seconds(t.idleSeconds)),
      el("td", {class: `num${t.expiresInSeconds !== null && t.expiresInSeconds < 5 ? " soon" : ""}`,
                "data-field": "expiresIn", title: `TTL ${t.ttl} s from the last request`},
        t.expiresInSeconds === null ? "(streaming)" : seconds(Math.max(0, t.expiresInSeconds)))));
    if (!rows.length) rows.push(el("tr", {}, el("td", {class: "empty", colspan: 11}, "none")));
    $("transactions").tBodies[0].replaceChildren(...rows);
  }

  function renderCommits(state) {
    const rows = state.commits.map((t) => el("tr", {"data-transaction": t.id},
      el("td", {}, clock(t.finishedAt)), el("td", {}, shortId(t.id)), el("td", {}, t.node), el("td", {}, t.port),
      el("td", {}, t.direction), el("td", {class: "num", "data-field": "flowFiles"}, t.flowFiles),
      el("td", {class: "num"}, bytes(t.bytes)), el("td", {class: "mono"}, t.peer), el("td", {}, t.responseCode)));
    if (!rows.length) rows.push(el("tr", {}, el("td", {class: "empty", colspan: 9}, "none yet")));
    $("commits").tBodies[0].replaceChildren(...rows);
  }

  // -- a queue listing ---------------------------------------------------------------------------------

  function renderListing(data) {
    $("listing-title").textContent = `Queue of port ${data.port} on node ${data.node}`;
    const more = data.queued > data.listed ? ` (the first ${data.listed})` : "";
    $("listing-summary").textContent =
      `${data.queued} FlowFiles queued, ${bytes(data.queuedBytes)}; listed ${data.listed}${more}, ` +
      `nothing taken; refreshed ${new Date().toLocaleTimeString()}`;
    const rows = data.flowfiles.map((f) => {
      const attrs = el("ul", {class: "attrs"}, ...Object.keys(f.attributes).sort().map((k) =>
        el("li", {}, el("span", {class: "k"}, k), " = ", el("span", {class: "v"}, f.attributes[k]))));
      const p = f.preview;
      const note = `${p.kind}${p.truncated ? `, first ${p.bytes} of ${f.size} bytes` : ""}`;
      return el("tr", {"data-uuid": f.uuid},
        el("td", {class: "num"}, f.position), el("td", {class: "mono", "data-field": "uuid"}, f.uuid),
        el("td", {}, f.filename || ""), el("td", {class: "num", title: `${f.size} bytes`}, bytes(f.size)),
        el("td", {"data-field": "attributes"}, attrs),
        el("td", {"data-field": "preview"}, el("span", {class: "kind"}, note),
          el("pre", {class: "preview", "data-kind": p.kind}, p.data + (p.truncated ? "\u2026" : ""))));
    });
    if (!rows.length) rows.push(el("tr", {}, el("td", {class: "empty", colspan: 6}, "the queue is empty")));
    $("listing").tBodies[0].replaceChildren(...rows);
    $("listing-section").hidden = false;
  }

  async function refreshListing() {
    if (!listing) return;
    const wanted = listing;
    const data = await getJSON(`api/ports/${encodeURIComponent(wanted.port)}/flowfiles` +
                               `?node=${wanted.node}&limit=${limits.listing}`);
    if (listing === wanted) renderListing(data);
  }

  function openListing(port, node) {
    listing = {port, node};
    if (lastState) renderQueues(lastState); // the selected cell changes
    history.replaceState(null, "", `#list=${encodeURIComponent(port)}@${node}`);
    refreshListing().then(() => setStatus("ok", "live")).catch((err) => setStatus("error", err.message));
  }

  function closeListing() {
    listing = null;
    if (lastState) renderQueues(lastState);
    $("listing-section").hidden = true;
    history.replaceState(null, "", location.pathname + location.search);
  }

  // -- polling -----------------------------------------------------------------------------------------

  async function poll() {
    timer = null;
    if (inFlight) return; // the poll under way schedules the next one
    inFlight = true;
    try {
      const state = await getJSON("api/state");
      limits = state.limits || limits;
      lastState = state;
      renderSummary(state);
      renderNodes(state);
      renderQueues(state);
      renderTransactions(state);
      renderCommits(state);
      await refreshListing();
      polls += 1;
      document.body.dataset.polls = String(polls);
      if ($("auto").checked) setStatus("ok", "live");
    } catch (err) {
      setStatus("error", `cannot refresh: ${err.message}`);
    } finally {
      inFlight = false;
    }
    schedule();
  }

  function schedule() {
    if ($("auto").checked && timer === null) timer = setTimeout(poll, POLL_MS);
  }

  function start() {
    const m = /^#list=(.+)@(\d+)$/.exec(location.hash);
    if (m) listing = {port: decodeURIComponent(m[1]), node: Number(m[2])};
    $("listing-close").addEventListener("click", closeListing);
    $("auto").addEventListener("change", () => {
      if ($("auto").checked) {
        poll();
      } else {
        clearTimeout(timer);
        timer = null;
        setStatus("paused", "paused");
      }
    });
    poll();
  }

  start();
})();
