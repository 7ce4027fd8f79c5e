// sluice admin dashboard: polls the admin API once a second with fetch and
// draws what it reads. No library, no build step. Values from the API are
// only ever inserted as text (textContent), never as HTML: identifiers are
// request data.
"use strict";

(function () {
  const TOKEN_KEY = "sluice-admin-token";
  const POLL_MS = 1000;
  const POINTS = 120; // two minutes of history per series
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];

  const $ = (id) => document.getElementById(id);
  const tokenRequired = document.querySelector('meta[name="sluice-token-required"]').content === "true";
  let prev = null; // the previous poll's data
  const resetDone = new Set(); // plugin id + identifier of the resets made from this page
  const history = { requests: new Map(), denials: new Map(), latency: new Map() };

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  function showTokenForm(message) {
    $("token-form").classList.remove("hidden");
    $("token-forget").classList.add("hidden");
    if (message) showError(message);
  }

  function showError(message) {
    const e = $("error");
    e.textContent = message;
    e.classList.toggle("hidden", !message);
  }

  // api calls the admin API with the token; it resolves to the decoded
  // JSON (null for 204) or rejects with an Error saying what failed.
  async function api(method, path) {
    const headers = {};
    if (token()) headers["Kong-Admin-Token"] = token();
    const res = await fetch(path, { method: method, headers: headers, cache: "no-store", credentials: "omit" });
    if (res.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      const err = new Error("the admin token was refused: enter it again");
      err.unauthorized = true;
      throw err;
    }
    if (res.status === 204) return null;
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(method + " " + path + ": " + res.status + " " + (body.message || ""));
    return body;
  }

  function text(tag, value, cls) {
    const el = document.createElement(tag);
    el.textContent = value === undefined || value === null ? "" : String(value);
    if (cls) el.className = cls;
    return el;
  }

  function fillTable(id, rows) {
    const tbody = $(id).querySelector("tbody");
    tbody.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      for (const c of cells) tr.append(c instanceof Node ? wrapCell(c) : text("td", c));
      return tr;
    }));
  }

  function wrapCell(node) {
    if (node.tagName === "TD") return node;
    const td = document.createElement("td");
    td.append(node);
    return td;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "-";
    return Number(v).toFixed(digits === undefined ? 1 : digits);
  }

  function seconds(v) {
    if (v === null || v === undefined) return "-";
    return v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(1) + " s";
  }

  // sum groups the samples of one metric by the labels named, summing values.
  function sum(data, name, keys, filter) {
    const out = new Map();
    for (const s of (data.metrics[name] || [])) {
      if (filter && !filter(s.labels)) continue;
      const k = keys.map((l) => s.labels[l] || "").join("\u0000");
      out.set(k, (out.get(k) || 0) + s.value);
    }
    return out;
  }

  // rates returns per-second rates of the grouped counters since the
  // previous poll.
  function rates(cur, old, dt) {
    const out = new Map();
    for (const [k, v] of cur) {
      const before = old && old.has(k) ? old.get(k) : v;
      out.set(k, dt > 0 ? Math.max(v - before, 0) / dt : 0);
    }
    return out;
  }

  function push(store, key, value) {
    let h = store.get(key);
    if (!h) { h = []; store.set(key, h); }
    h.push(value);
    if (h.length > POINTS) h.shift();
  }

  // quantile estimates the q-quantile of the observations between two
  // cumulative bucket lists, interpolating within a bucket as Prometheus'
  // histogram_quantile does. null when nothing was observed.
  function quantile(q, cur, old) {
    const counts = cur.map((b, i) => b[1] - (old && old[i] ? old[i][1] : 0));
    const total = counts[counts.length - 1];
    if (!(total > 0)) return null;
    const rank = q * total;
    for (let i = 0; i < cur.length; i++) {
      if (counts[i] >= rank) {
        const upper = cur[i][0] < 0 ? cur[Math.max(i - 1, 0)][0] : cur[i][0];
        const lower = i === 0 ? 0 : cur[i - 1][0];
        const below = i === 0 ? 0 : counts[i - 1];
        const inBucket = counts[i] - below;
        if (cur[i][0] < 0 || inBucket <= 0) return upper;
        return lower + (upper - lower) * (rank - below) / inBucket;
      }
    }
    return null;
  }

  function drawChart(canvas, store, unit) {
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    canvas.width = w * ratio;
    canvas.height = h * ratio;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const left = 54, bottom = h - 22, top = 8, right = w - 8;
    let max = 0;
    for (const values of store.values()) for (const v of values) if (v !== null && v > max) max = v;
    if (max <= 0) max = 1;
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7385";
    ctx.strokeStyle = "#eceff3";
    for (let i = 0; i <= 4; i++) {
      const y = bottom - (bottom - top) * i / 4;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
      ctx.fillText(fmt(max * i / 4, max < 10 ? 2 : 0) + unit, 2, y + 4);
    }
    let c = 0, legendX = left;
    for (const [key, values] of store) {
      const color = COLORS[c++ % COLORS.length];
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      let pen = false;
      values.forEach((v, i) => {
        const x = right - (values.length - 1 - i) * (right - left) / (POINTS - 1);
        if (v === null) { pen = false; return; }
        const y = bottom - (bottom - top) * v / max;
        if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        pen = true;
      });
      ctx.stroke();
      const label = key.replace(/\u0000/g, " ") || "(no route)";
      ctx.fillStyle = color;
      ctx.fillText(label, legendX, h - 6);
      legendX += ctx.measureText(label).width + 14;
    }
  }

  function render(data, top, plugins, reloads) {
    const st = data.status;
    $("generation").textContent = "generation " + st.generation;
    $("config").textContent = st.ready ? st.configuration_source + " " + (st.configuration_hash || "").slice(0, 12) : "no configuration";
    $("updated").textContent = "updated " + new Date(data.time).toLocaleTimeString();
    const dt = prev ? (Date.parse(data.time) - Date.parse(prev.time)) / 1000 : 0;

    // Requests and 429s by route.
    const req = sum(data, "sluice_http_requests_total", ["route", "service"]);
    const lim = sum(data, "sluice_http_requests_total", ["route", "service"], (l) => l.code === "429");
    const reqRate = rates(req, prev && sum(prev, "sluice_http_requests_total", ["route", "service"]), dt);
    const limRate = rates(lim, prev && sum(prev, "sluice_http_requests_total", ["route", "service"], (l) => l.code === "429"), dt);
    const routes = [...req.keys()].sort();
    for (const k of routes) push(history.requests, k.split("\u0000")[0], prev ? reqRate.get(k) : null);
    drawChart($("chart-requests"), history.requests, "/s");
    fillTable("routes-table", routes.map((k) => {
      const [route, service] = k.split("\u0000");
      return [route || "(no route)", service, fmt(reqRate.get(k)), fmt(limRate.get(k) || 0), req.get(k), lim.get(k) || 0];
    }));

    // Denials by plugin (the chart), and by plugin, namespace and window.
    const denied = (l) => l.outcome === "denied";
    const byPlugin = sum(data, "sluice_plugin_decisions_total", ["plugin"], denied);
    const byPluginRate = rates(byPlugin, prev && sum(prev, "sluice_plugin_decisions_total", ["plugin"], denied), dt);
    for (const k of [...byPlugin.keys()].sort()) push(history.denials, k, prev ? byPluginRate.get(k) : null);
    drawChart($("chart-denials"), history.denials, "/s");
    const keys = ["plugin", "namespace", "window"];
    const den = sum(data, "sluice_rate_limit_denials_total", keys);
    const denRate = rates(den, prev && sum(prev, "sluice_rate_limit_denials_total", keys), dt);
    fillTable("denials-table", [...den.keys()].sort().map((k) => {
      const [plugin, namespace, window] = k.split("\u0000");
      const total = text("td", den.get(k), "denials-total");
      total.dataset.plugin = plugin;
      return [plugin, namespace, window ? window + " s" : "-", fmt(denRate.get(k)), total];
    }));

    // Decision latency over the last poll, per plugin.
    const oldHist = new Map();
    if (prev) for (const s of (prev.metrics.sluice_plugin_decision_duration_seconds || [])) oldHist.set(s.labels.plugin, s.buckets);
    for (const s of (data.metrics.sluice_plugin_decision_duration_seconds || [])) {
      const old = prev ? oldHist.get(s.labels.plugin) : null;
      const p50 = prev ? quantile(0.5, s.buckets, old) : null;
      const p99 = prev ? quantile(0.99, s.buckets, old) : null;
      push(history.latency, "p50 " + s.labels.plugin, p50 === null ? null : p50 * 1000);
      push(history.latency, "p99 " + s.labels.plugin, p99 === null ? null : p99 * 1000);
    }
    drawChart($("chart-latency"), history.latency, " ms");

    // Top limited identifiers, with their reset buttons.
    const rows = [];
    for (const list of top.data || []) {
      const p = list.plugin;
      for (const e of list.top || []) {
        const done = resetDone.has(p.id + "\u0000" + e.identifier);
        const b = text("button", done ? "Reset done" : "Reset", "reset");
        b.type = "button";
        b.dataset.plugin = p.id;
        b.dataset.identifier = e.identifier;
        b.dataset.instance = p.instance_name || "";
        b.addEventListener("click", () => reset(b, p.id, e.identifier));
        const id = text("td", e.identifier, "identifier");
        const consumer = (list.consumers || {})[e.identifier];
        if (consumer && (consumer.username || consumer.custom_id)) {
          id.title = "consumer " + (consumer.username || consumer.custom_id);
          id.append(text("span", " (" + (consumer.username || consumer.custom_id) + ")", "consumer"));
        }
        rows.push([p.instance_name || p.name + " " + p.id.slice(0, 8), id, e.denied, e.requests, b]);
      }
    }
    fillTable("top-table", rows);
    $("top-empty").classList.toggle("hidden", rows.length > 0);

    // Redis: per namespace from the metrics, per instance from the plugins.
    const ns = new Map();
    const at = (name) => { if (!ns.has(name)) ns.set(name, {}); return ns.get(name); };
    for (const s of data.metrics.sluice_redis_fallback || []) at(s.labels.namespace).fallback = s.value;
    for (const s of data.metrics.sluice_redis_fault || []) if (s.value > 0) at(s.labels.namespace).fault = s.labels.reason;
    for (const s of data.metrics.sluice_redis_state_changes_total || []) if (s.labels.state === "fallback") at(s.labels.namespace).fallbacks = s.value;
    for (const s of data.metrics.sluice_redis_sync_lag_seconds || []) at(s.labels.namespace).lag = s.value;
    for (const s of data.metrics.sluice_redis_sync_interval_seconds || []) at(s.labels.namespace).interval = s.value;
    for (const s of data.metrics.sluice_redis_sync_accuracy_budget || []) at(s.labels.namespace).budget = s.value;
    // A namespace that never fell back has no fallback series: its
    // instances' stores say how it is.
    for (const p of plugins.data || []) {
      if (p.strategy === "redis" && p.store && p.store.state) at(p.namespace || "").store = p.store.state;
    }
    fillTable("redis-table", [...ns.keys()].sort().map((k) => {
      const v = ns.get(k);
      const state = v.fallback !== undefined ? (v.fallback > 0 ? "fallback" : "connected") : v.store || "-";
      return [k, text("td", state, "state-" + state), v.fault || "", v.fallbacks || 0,
        v.lag === undefined ? "-" : seconds(v.lag), v.interval === undefined ? "-" : seconds(v.interval),
        v.budget === undefined ? "-" : fmt(v.budget) + " requests"];
    }));
    fillTable("stores-table", (plugins.data || []).map((p) => {
      const s = p.store || {};
      return [p.instance_name || p.name + " " + p.id.slice(0, 8), p.namespace || "", p.strategy || "",
        text("td", (s.state || "") + (s.reason ? " (" + s.reason + ")" : ""), "state-" + s.state),
        s.since ? new Date(s.since).toLocaleString() : "", s.counters];
    }));

    // Reload history, the newest first.
    fillTable("reloads-table", (reloads.data || []).map((r) => [
      new Date(r.time).toLocaleString(), r.source, text("td", r.result, "result-" + r.result), r.generation,
      (r.errors || []).map((e) => (e.field ? e.field + ": " : "") + e.message).join("; "),
    ]));
    prev = data;
    document.body.dataset.polls = String((Number(document.body.dataset.polls) || 0) + 1);
  }

  async function reset(button, plugin, identifier) {
    button.disabled = true;
    try {
      await api("DELETE", "/rate-limiting/plugins/" + encodeURIComponent(plugin) + "/counters/" + encodeURIComponent(identifier));
      resetDone.add(plugin + "\u0000" + identifier);
      button.textContent = "Reset done";
      showError("");
    } catch (e) {
      button.disabled = false;
      showError("resetting " + identifier + ": " + e.message);
    }
  }

  let timer = null;
  async function poll() {
    timer = null;
    if (tokenRequired && !token()) { showTokenForm(); return; }
    try {
      const [data, top, plugins, reloads] = await Promise.all([
        api("GET", "/dashboard/data"),
        api("GET", "/rate-limiting/top?by=denied&n=10").catch((e) => { if (e.unauthorized) throw e; return { data: [] }; }),
        api("GET", "/rate-limiting/plugins").catch((e) => { if (e.unauthorized) throw e; return { data: [] }; }),
        api("GET", "/config/reloads"),
      ]);
      render(data, top, plugins, reloads);
      showError("");
    } catch (e) {
      if (e.unauthorized) { showTokenForm(e.message); return; }
      showError("polling the admin API: " + e.message);
    }
    timer = setTimeout(poll, POLL_MS);
  }

  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    $("token-form").classList.add("hidden");
    $("token-forget").classList.remove("hidden");
    showError("");
    if (timer === null) poll();
  });
  $("token-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    if (timer !== null) { clearTimeout(timer); timer = null; }
    showTokenForm();
  });
  if (tokenRequired && token()) $("token-forget").classList.remove("hidden");
  poll();
})();
