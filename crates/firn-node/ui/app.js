// Firn's page: the cluster, a key's timeline, a prefix at a time, a log or stream.
// Plain JavaScript over the node's own HTTP API (the same endpoints curl uses); nothing is
// fetched from anywhere else. The view and its inputs live in the URL's fragment
// (`#view=key&key=sensor/1`), so a view can be bookmarked and shared.
"use strict";

const $ = (selector) => document.querySelector(selector);
const enc = encodeURIComponent;

// The causality token of this page's session: every answer raises it, every request sends
// it, so the page never shows anything older than what it has already shown.
let token = null;

// On a node with users: the bearer token the page signs its requests with, kept for this
// browser tab only.
const bearer = () => sessionStorage.getItem("firn-bearer");

function headers() {
  const h = {};
  if (token) h["Firn-After"] = token;
  if (bearer()) h.Authorization = `Bearer ${bearer()}`;
  return h;
}

/** Asks for a token when the node answers 401; a new one is tried at once. */
function askForToken(error) {
  const form = $("#sign-in");
  form.hidden = false;
  $("#sign-in-why").textContent = error.code === "WRONGPASS" ? "that token is not known here" : "this node has users";
}

/** GET `path` from this node; an error answer throws with the node's message. */
async function api(path) {
  const answer = await fetch(path, { headers: headers() });
  const next = answer.headers.get("Firn-Token");
  if (next) token = next;
  if (!answer.ok) {
    let body = {};
    try { body = await answer.json(); } catch (_) { /* not JSON */ }
    const error = new Error(`${answer.status} ${body.error || ""} ${body.message || answer.statusText}`.trim());
    error.status = answer.status;
    error.code = body.error;
    if (answer.status === 401) askForToken(error);
    throw error;
  }
  return answer;
}

const apiJson = async (path) => (await api(path)).json();

function showError(error) {
  const p = $("#error");
  p.hidden = !error;
  p.textContent = error ? String(error.message || error) : "";
}

/** A table body filled with one row per item; `cells` gives each row's cells (text or nodes). */
function fillTable(table, items, cells, append = false) {
  const body = $(`${table} tbody`);
  if (!append) body.replaceChildren();
  for (const item of items) {
    const tr = document.createElement("tr");
    for (const cell of cells(item)) {
      const td = document.createElement("td");
      if (cell instanceof Node) td.append(cell); else td.textContent = cell ?? "";
      tr.append(td);
    }
    body.append(tr);
  }
}

/** A JSON value's bytes as the listings give them: text, or a note for binary or large. */
function shownValue(v) {
  if (v.large) return `(large value, ${v.size} bytes)`;
  if (v.deleted) return "(deleted)";
  if (v.value_base64 !== undefined) return `(binary, ${v.size} bytes)`;
  const text = v.value ?? "";
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** A record's payload bytes, from the text or base64 the log's JSON gives them in. */
function payloadBytes(r) {
  if (r.value_base64 !== undefined) return Uint8Array.from(atob(r.value_base64), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(r.value ?? "");
}

/**
 * A stream entry's fields as XADD stores them (`u32 pairs`, then `u32 len · field · u32 len
 * · value` per pair, big-endian: firn_model::log::encode_fields), as `f=v f=v`; null when the
 * payload is not one.
 */
function streamFields(r) {
  const bytes = payloadBytes(r);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const text = new TextDecoder();
  let at = 0;
  const take = () => {
    if (at + 4 > bytes.length) throw new Error("cut short");
    const n = view.getUint32(at);
    if (at + 4 + n > bytes.length) throw new Error("cut short");
    const part = text.decode(bytes.subarray(at + 4, at + 4 + n));
    at += 4 + n;
    return part;
  };
  try {
    if (bytes.length < 4) return null;
    const pairs = view.getUint32(0);
    at = 4;
    const shown = [];
    for (let i = 0; i < pairs; i += 1) shown.push(`${take()}=${take()}`);
    return at === bytes.length ? shown.join(" ") : null;
  } catch (_) {
    return null;
  }
}

const micros = (rfc3339) => Date.parse(rfc3339) * 1000;
const timeText = (us) => new Date(us / 1000).toISOString();
/** A commit stamp (`WALL_US-LOGICAL`) as the time it names. */
const stampTime = (stamp) => timeText(Number(String(stamp).split("-")[0]));

// ---------------------------------------------------------------------------------------
// The cluster: polled once a second while shown.

let clusterTimer = null;

// A node's free space; below its reserve the shards it holds refuse writes (NOSPACE).
const diskText = (disk) => {
  if (!disk) return "";
  const mib = (bytes) => `${Math.floor(bytes / 1048576).toLocaleString("en")} MiB`;
  return disk.low ? `${mib(disk.free_bytes)} · below the reserve (${mib(disk.reserve_bytes)}): writes refused` : mib(disk.free_bytes);
};

// A node's clock against its peers': within the bound on clock offsets or beyond it (then
// it stamps no writes and leads no shard), with the offset it measured to each peer.
const clockText = (clock) => {
  if (!clock) return "";
  const bound = `${Math.round(clock.max_offset_us / 1000)} ms`;
  const ms = (us) => `${us >= 0 ? "+" : "−"}${(Math.abs(us) / 1000).toFixed(2)} ms`;
  const peers = Object.entries(clock.peers || {})
    .map(([id, o]) => `node ${id} ${ms(o.offset_us)} ±${(o.uncertainty_us / 1000).toFixed(2)}`)
    .join(", ");
  const state = clock.within_bound ? `within ${bound}` : `BEYOND ${bound}: stamps no writes`;
  return peers ? `${state} · ${peers}` : state;
};

async function refreshCluster() {
  try {
    const answer = await apiJson("/v1/cluster");
    const cluster = answer.cluster;
    $("#served-by").textContent = `served by node ${answer.node_id}`;
    fillTable("#nodes", cluster.nodes, (n) => [
      n.node_id, n.resp_addr, n.http_addr, n.up ? "up" : "down", n.meta,
      n.replicas.map((r) => `${r.shard_id}:${r.state}${r.recovering ? " (recovering)" : ""}`).join(" "),
      diskText(n.disk),
      clockText(n.clock),
    ]);
    fillTable("#shards", cluster.shards, (s) => [
      s.shard_id,
      `${s.slots[0]}–${s.slots[1]}`,
      s.durability,
      s.leader ?? "none",
      s.replicas.map((id) => {
        const lag = s.replica_lag[id];
        const closed = (s.closed_lag_ms || {})[id];
        return `node ${id}${id === s.leader ? " (leader)" : ""}: ${lag ?? "?"} · ${closed === undefined ? "?" : `${closed} ms`}`;
      }).join(", "),
      s.moving ? `${s.moving.add ? `adding node ${s.moving.add}` : ""}${s.moving.add && s.moving.remove ? ", " : ""}${s.moving.remove ? `removing node ${s.moving.remove}` : ""}` : "",
      s.followed ? `${s.followed.step} ${s.followed.from ?? "?"} → ${s.followed.to}, ${Math.round((Date.now() - s.followed.at_ms) / 1000)} s ago` : "",
    ]);
    // On a hub: the sites that send to it, as their cursors here say.
    const sites = answer.sites || [];
    $("#sites-part").hidden = sites.length === 0;
    fillTable("#sites", sites, (s) => [
      s.site,
      s.shards,
      `${(s.since_contact_ms / 1000).toFixed(1)} s ago`,
      `${(s.lag_ms / 1000).toFixed(1)} s`,
    ]);
    const leaving = $("#leaving");
    leaving.hidden = cluster.leaving.length === 0;
    leaving.textContent = `leaving: ${cluster.leaving.map((id) => `node ${id}`).join(", ")}`;
    $("#cluster-updated").textContent = `live · ${new Date().toLocaleTimeString()}`;
    showError(null);
  } catch (error) {
    showError(error);
  }
}

// ---------------------------------------------------------------------------------------
// A key: its versions on a time axis, the value at a picked time, live updates by watch.

const keyView = { key: null, versions: [], watch: null, picked: null, from: 0, to: 0 };

async function showKey(key) {
  if (keyView.watch) keyView.watch.close();
  Object.assign(keyView, { key, versions: [], watch: null, picked: null });
  $("#key-input").value = key;
  $("#time-input").value = "";
  $("#time-slider").value = 1000;
  try {
    const history = await apiJson(`/v1/history/${enc(key)}?limit=1000`);
    keyView.versions = history.versions;
    $("#key-body").hidden = false;
    renderKey();
    await showValueAt();
    showError(null);
  } catch (error) {
    showError(error);
    return;
  }
  // New versions as they commit.
  const watch = follow(`/v1/watch?key=${enc(key)}`, (event, data) => {
    if (event === "put" || event === "del") onVersion(data);
    else if (event === "error") showError(new Error(JSON.parse(data).message));
  });
  keyView.watch = watch;
  let updates = 0;
  $("#key-live").textContent = "live";
  const onVersion = (data) => {
    if (keyView.watch !== watch) return;
    const version = JSON.parse(data);
    if (keyView.versions.some((v) => v.version === version.version)) return;
    keyView.versions.push(version);
    updates += 1;
    $("#key-live").textContent = `live · ${updates} new`;
    renderKey();
    if (keyView.picked === null) showValueAt();
  };
}

/**
 * Follows a Server-Sent Events stream with the page's headers (an EventSource cannot send a
 * bearer token): `onEvent(event, data)` for each event; `.close()` ends it.
 */
function follow(path, onEvent) {
  const stop = new AbortController();
  (async () => {
    const answer = await fetch(path, { headers: headers(), signal: stop.signal });
    if (!answer.ok) {
      const body = await answer.json().catch(() => ({}));
      if (answer.status === 401) askForToken({ code: body.error });
      showError(new Error(`${answer.status} ${body.error || ""} ${body.message || ""}`));
      return;
    }
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffered += value;
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) onEvent(event, data.join("\n"));
      }
    }
  })().catch((error) => {
    if (error.name !== "AbortError") showError(error);
  });
  return { close: () => stop.abort() };
}

function renderKey() {
  const versions = keyView.versions;
  const now = Date.now() * 1000;
  const first = versions.length ? micros(versions[0].commit_time) : now - 60e6;
  keyView.from = Math.min(first, now - 1e6);
  keyView.to = now;
  const span = keyView.to - keyView.from;
  const x = (us) => 10 + ((us - keyView.from) / span) * 980;
  const svg = $("#timeline");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const axis = document.createElementNS(ns, "line");
  Object.entries({ x1: 10, x2: 990, y1: 60, y2: 60, class: "axis-line" }).forEach(([k, v]) => axis.setAttribute(k, v));
  svg.append(axis);
  let lastLabel = -Infinity;
  let lastDot = -Infinity;
  for (const v of versions) {
    const dot = document.createElementNS(ns, "circle");
    const at = micros(v.commit_time);
    // Versions close in time are set a mark apart, so that each can still be clicked (its
    // title keeps its true time; only the axis's last pixels may still crowd).
    const cx = Math.min(990, Math.max(x(at), lastDot + 15));
    lastDot = cx;
    Object.entries({ cx, cy: 60, r: 7, class: v.deleted ? "version deleted" : "version", "data-version": v.version })
      .forEach(([k, value]) => dot.setAttribute(k, value));
    const title = document.createElementNS(ns, "title");
    title.textContent = `version ${v.version} at ${v.commit_time}: ${shownValue(v)}`;
    dot.append(title);
    dot.addEventListener("click", () => pickTime(v.commit_ts, at));
    svg.append(dot);
    // A label only where it does not run into the one before (every mark keeps its title).
    if (cx - lastLabel >= 30) {
      lastLabel = cx;
      const label = document.createElementNS(ns, "text");
      Object.entries({ x: cx, y: 35, class: "version-label" }).forEach(([k, value]) => label.setAttribute(k, value));
      label.textContent = `v${v.version}`;
      svg.append(label);
    }
  }
  if (keyView.picked !== null) {
    const mark = document.createElementNS(ns, "line");
    const at = keyView.picked.us;
    Object.entries({ x1: x(at), x2: x(at), y1: 5, y2: 85, class: "picked" }).forEach(([k, v]) => mark.setAttribute(k, v));
    svg.append(mark);
  }
  $("#axis-from").textContent = timeText(keyView.from);
  $("#axis-to").textContent = "now";
  fillTable("#versions", [...versions].reverse(), (v) => [
    v.version, v.commit_time, v.event_time === null ? "" : timeText(v.event_time), v.size, shownValue(v),
  ]);
}

/** Picks the time the value is shown at: `at` is what the read sends (`W-L` or µs). */
function pickTime(at, us) {
  keyView.picked = at === null ? null : { at: String(at), us };
  $("#time-input").value = at === null ? "" : String(at);
  if (at !== null) $("#time-slider").value = Math.round(((us - keyView.from) / (keyView.to - keyView.from)) * 1000);
  renderKey();
  showValueAt();
}

async function showValueAt() {
  const key = keyView.key;
  const picked = keyView.picked;
  $("#picked-time").textContent = picked ? `${picked.at} (${timeText(picked.us)})` : "now";
  const out = $("#value-at");
  try {
    const query = picked ? `?as_of=${enc(picked.at)}` : "";
    const answer = await api(`/v1/kv/${enc(key)}${query}`);
    const version = answer.headers.get("Firn-Version");
    const size = Number(answer.headers.get("Content-Length") || 0);
    let text;
    if (size > 4096) {
      answer.body.cancel();
      text = `(${size} bytes)`;
    } else {
      text = await answer.text();
    }
    if (keyView.key !== key || keyView.picked !== picked) return;
    out.dataset.version = version;
    out.textContent = `version ${version}: ${text}`;
    showError(null);
  } catch (error) {
    if (keyView.key !== key || keyView.picked !== picked) return;
    delete out.dataset.version;
    if (error.status === 404) out.textContent = "no value (absent or deleted)";
    else showError(error);
  }
}

// ---------------------------------------------------------------------------------------
// A prefix at a time: one consistent cut across shards (a snapshot), page by page.

const prefixView = { prefix: "", at: null, cursor: null, pages: 0 };

async function showPrefix(prefix, at, more = false) {
  let path = `/v1/snapshot?prefix=${enc(prefix)}&limit=100`;
  if (at) path += `&at=${enc(at)}`;
  if (more) path += `&cursor=${enc(prefixView.cursor)}`;
  try {
    const cut = await apiJson(path);
    // Later pages are read at the first page's time: the whole table is one cut.
    Object.assign(prefixView, {
      prefix,
      at: cut.at,
      cursor: cut.next_cursor,
      pages: more ? prefixView.pages + 1 : 1,
    });
    $("#prefix-cut").textContent = `one cut across every shard at ${cut.at_time} (stamp ${cut.at})`;
    $("#prefix-cut").dataset.at = cut.at;
    fillTable("#prefix-table", cut.keys, (v) => [v.key, v.version, v.commit_time, shownValue(v)], more);
    $("#prefix-more").hidden = !cut.next_cursor;
    showError(null);
  } catch (error) {
    showError(error);
  }
}

// ---------------------------------------------------------------------------------------
// A log or stream: records by tag, and a stream's consumer groups; polled every 2 s.

let logTimer = null;
let prefixTimer = null;

async function refreshLog(log, tag) {
  const base = `/v1/log/${enc(log)}/${enc(tag)}`;
  try {
    const info = await apiJson(base);
    $("#log-info").textContent =
      `${log} / ${tag}: ${info.len} records held (first ${info.first_seq ?? "-"}, last ${info.last_seq ?? "-"}), ` +
      `${info.added} ever appended, trimmed before ${info.first_kept}` +
      (info.len > 200 ? "; the first 200 shown" : "");
    const range = await apiJson(`${base}/range?limit=200`);
    // A stream (the log K read by its tag K) shows its entries' fields.
    const shown = (r) => (tag === log && streamFields(r)) || shownValue(r);
    fillTable("#records", range.records, (r) => [r.seq, r.tags.join(", "), stampTime(r.commit_ts), shown(r)]);
    showError(null);
  } catch (error) {
    if (error.code === "NOLOG") {
      $("#log-info").textContent = `no log named ${log}`;
      fillTable("#records", [], () => []);
    } else {
      showError(error);
    }
  }
  const none = $("#groups-none");
  if (tag !== log) {
    // Consumer groups belong to streams: the log read by its own name as the tag.
    fillTable("#groups", [], () => []);
    none.hidden = false;
    none.textContent = `a plain log has no consumer groups; a stream does (the log ${log} read by the tag ${log})`;
    return;
  }
  try {
    const { groups } = await apiJson(`/v1/streams/${enc(log)}/groups`);
    fillTable("#groups", groups, (g) => [g.name, g.consumers, g.pending, g.last_delivered, g.entries_read ?? "?", g.lag ?? "?"]);
    none.hidden = groups.length > 0;
    none.textContent = "no consumer groups";
  } catch (error) {
    fillTable("#groups", [], () => []);
    none.hidden = false;
    none.textContent = `no consumer groups (${error.message})`;
  }
}

// ---------------------------------------------------------------------------------------
// Views, from the URL's fragment.

function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const view = params.get("view") || "cluster";
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = section.id !== `view-${view}`;
  }
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", link.dataset.view === view);
  }
  clearInterval(clusterTimer);
  clearInterval(logTimer);
  clearInterval(prefixTimer);
  if (view !== "key" && keyView.watch) {
    keyView.watch.close();
    keyView.watch = null;
    keyView.key = null;
  }
  showError(null);
  if (view === "cluster") {
    refreshCluster();
    clusterTimer = setInterval(refreshCluster, 1000);
  } else if (view === "key" && params.get("key") && params.get("key") !== keyView.key) {
    showKey(params.get("key"));
  } else if (view === "prefix" && params.has("prefix")) {
    const prefix = params.get("prefix");
    const at = params.get("at");
    $("#prefix-input").value = prefix;
    $("#prefix-at").value = at || "";
    showPrefix(prefix, at);
    // Without a time the table follows the newest closed time, while one page is shown.
    if (!at) {
      prefixTimer = setInterval(() => {
        if (prefixView.pages === 1) showPrefix(prefix, null);
      }, 2000);
    }
  } else if (view === "log" && params.get("log")) {
    const log = params.get("log");
    const tag = params.get("tag") || log;
    $("#log-input").value = log;
    $("#tag-input").value = params.get("tag") || "";
    refreshLog(log, tag);
    logTimer = setInterval(() => refreshLog(log, tag), 2000);
  }
}

/** Shows the view `params` name; the same fragment again (no hashchange) reads again. */
function go(params) {
  const hash = `#${new URLSearchParams(params)}`;
  if (location.hash === hash) route(); else location.hash = hash;
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  $("#key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("#key-input").value;
    if (key === keyView.key) showKey(key); else go({ view: "key", key });
  });
  $("#prefix-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const params = { view: "prefix", prefix: $("#prefix-input").value };
    if ($("#prefix-at").value) params.at = $("#prefix-at").value;
    go(params);
  });
  $("#prefix-more").addEventListener("click", () => showPrefix(prefixView.prefix, prefixView.at, true));
  $("#log-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const params = { view: "log", log: $("#log-input").value };
    if ($("#tag-input").value) params.tag = $("#tag-input").value;
    go(params);
  });
  let sliderWait = null;
  $("#time-slider").addEventListener("input", (e) => {
    clearTimeout(sliderWait);
    sliderWait = setTimeout(() => {
      const position = Number(e.target.value);
      if (position >= 1000) return pickTime(null, null);
      const us = Math.round(keyView.from + (position / 1000) * (keyView.to - keyView.from));
      pickTime(us, us);
    }, 150);
  });
  $("#time-input").addEventListener("change", (e) => {
    const text = e.target.value.trim();
    if (!text) return pickTime(null, null);
    // A stamp `W-L` or microseconds as they are; anything else is read as a date.
    const us = /^\d+(-\d+)?$/.test(text) ? Number(text.split("-")[0]) : Date.parse(text) * 1000;
    pickTime(text, us);
  });
  $("#sign-in").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("firn-bearer", $("#bearer-input").value.trim());
    $("#sign-in").hidden = true;
    keyView.key = null;
    route();
  });
  route();
});
