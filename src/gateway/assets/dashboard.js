// The usage dashboard: reads the admin API with the token kept in this tab's sessionStorage
// and draws what it answers. Every string from the server goes into the page as text
// (textContent), never as markup.
"use strict";
(function () {
  const KEY = "usage-guard-admin-token";
  const COLORS = ["#2f6fdd", "#d9480f", "#2b8a3e", "#9c36b5", "#e67700", "#0b7285",
    "#c2255c", "#5c940d", "#364fc7", "#862e9c"];
  const charts = {};
  const $ = (id) => document.getElementById(id);

  // The token: from the address (?token= or #token=, then removed from it), else the tab's.
  function takeTokenFromAddress() {
    const url = new URL(window.location.href);
    const fromQuery = url.searchParams.get("token");
    const hash = new URLSearchParams(url.hash.replace(/^#/, ""));
    const token = fromQuery || hash.get("token");
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    url.searchParams.delete("token");
    url.hash = hash.get("token") ? "#/" : url.hash;
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }

  function status(text) { $("status").textContent = text || ""; }

  async function api(path) {
    const token = sessionStorage.getItem(KEY);
    const response = await fetch(path, { headers: { Authorization: "Bearer " + token } });
    if (response.status === 401 || response.status === 403) {
      sessionStorage.removeItem(KEY);
      const body = await response.json().catch(() => ({}));
      showLogin(body.error || "Sign in with the admin token");
      throw new Error("signed out");
    }
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
    return body;
  }

  // Numbers as the CLI prints them: grouped integers, dollars to the micro-dollar.
  function whole(n) { return Number(n).toLocaleString("en-US"); }
  function dollars(micros) {
    const m = Math.max(0, Math.round(Number(micros)));
    const rest = String(m % 1000000).padStart(6, "0");
    return "$" + whole(Math.floor(m / 1000000)) + "." + rest;
  }
  function when(iso) { return iso ? iso.replace("T", " ").replace("Z", " UTC") : "-"; }
  function label(key) { return key === null || key === undefined ? "(none)" : String(key); }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  // A number cell: the exact value in data-value, the formatted one shown.
  function num(value, shown) {
    const td = el("td", shown === undefined ? whole(value) : shown, "n");
    td.dataset.value = String(value);
    return td;
  }
  function row(tbody, cells) {
    const tr = document.createElement("tr");
    cells.forEach((c) => tr.appendChild(typeof c === "object" ? c : el("td", c)));
    tbody.appendChild(tr);
    return tr;
  }
  function clear(tbody, columns, emptyText) {
    tbody.replaceChildren();
    if (emptyText) {
      const td = el("td", emptyText, "empty");
      td.colSpan = columns;
      row(tbody, [td]);
    }
  }
  function userLink(name) {
    const a = el("a", name);
    a.href = "#/user/" + encodeURIComponent(name);
    const td = el("td");
    td.appendChild(a);
    return td;
  }
  function ruleName(r) {
    const scope = r.team ? r.limit_type + " (" + r.team + ")" : r.limit_type;
    // A direct rule is always the person's own; say so only where a rule could be shared.
    return r.per_person && r.limit_type !== "direct" ? scope + ", each person" : scope;
  }

  // A line per series on uPlot, as wide as its box.
  function drawChart(id, t, lines, unit) {
    const box = $(id);
    if (charts[id]) { charts[id].destroy(); delete charts[id]; }
    box.replaceChildren();
    const width = Math.max(240, box.clientWidth);
    const height = window.innerWidth < 600 ? 200 : 280;
    const value = unit === "cost_micros"
      ? (u, v) => (v === null ? "-" : "$" + (v / 1e6).toFixed(4))
      : (u, v) => (v === null ? "-" : whole(v));
    const series = [{}].concat(lines.map((l, i) => ({
      label: label(l.key), stroke: COLORS[i % COLORS.length], width: 2, value,
    })));
    const axisValues = unit === "cost_micros"
      ? (u, ticks) => ticks.map((v) => "$" + (v / 1e6).toFixed(2))
      : (u, ticks) => ticks.map((v) => whole(v));
    const options = {
      width, height, series,
      axes: [{}, { values: axisValues, size: 70 }],
      scales: { x: { time: true } },
      legend: { live: true },
    };
    const data = [t].concat(lines.map((l) => l.values));
    charts[id] = new uPlot(options, data, box);
  }
  window.addEventListener("resize", () => {
    Object.keys(charts).forEach((id) => {
      const w = Math.max(240, $(id).clientWidth);
      charts[id].setSize({ width: w, height: window.innerWidth < 600 ? 200 : 280 });
    });
  });

  async function loadUsage() {
    const bucket = $("range").value, group = $("group").value, metric = $("metric").value;
    const s = await api("/admin/usage/series?bucket=" + bucket + "&group=" + group);
    drawChart("usage-chart", s.t, s.series.map((x) => ({ key: x.key, values: x[metric] })), metric);
    $("totals-key").textContent = group;
    $("totals-caption").textContent = "From " + when(s.since) + " to " + when(s.until) +
      (s.groups > s.totals.length ? " (the " + s.totals.length + " with the most tokens, of " + s.groups + ")" : "");
    $("totals").dataset.since = s.since;
    $("totals").dataset.until = s.until;
    const tbody = $("totals").tBodies[0];
    clear(tbody, 6, s.totals.length ? null : "No usage in this range.");
    s.totals.forEach((g) => {
      const key = group === "user" && g.key !== null ? userLink(g.key) : el("td", label(g.key));
      const tr = row(tbody, [key, num(g.requests), num(g.tokens), num(g.input_tokens),
        num(g.output_tokens), num(g.cost_micros, dollars(g.cost_micros))]);
      tr.dataset.key = label(g.key);
    });
  }

  function counterCells(r) {
    const left = num(r.left);
    if (r.amount > 0 && r.left * 10 <= r.amount) left.classList.add("low");
    return [el("td", ruleName(r)), el("td", r.metric), el("td", r.window), num(r.used),
      num(r.reserved), left, num(r.amount), el("td", when(r.resets_at))];
  }

  async function loadRules() {
    const c = await api("/admin/dashboard/counters");
    const tbody = $("counters").tBodies[0];
    clear(tbody, 10, c.counters.length ? null : "No rules in force for anyone seen yet.");
    c.counters.forEach((p) => {
      p.rules.concat(p.ceilings).forEach((r) => {
        const tr = row(tbody, [userLink(p.principal), el("td", p.model)].concat(counterCells(r)));
        tr.dataset.principal = p.principal;
        tr.dataset.model = p.model;
      });
    });
    if (c.truncated) status("Showing the first 200 people and models.");
  }

  async function loadRefusals() {
    const r = await api("/admin/refusals");
    const tbody = $("refusal-table").tBodies[0];
    clear(tbody, 4, r.by_reason.length ? null : "No refusals since this server started.");
    const most = Math.max(1, ...r.by_reason.map((x) => x.count));
    r.by_reason.sort((a, b) => b.count - a.count).forEach((x) => {
      const bar = el("div", null, "bar");
      bar.style.width = (100 * x.count / most).toFixed(1) + "%";
      const cell = el("td", null, "bar-cell");
      cell.appendChild(bar);
      const tr = row(tbody, [el("td", x.reason), el("td", x.limit_type || "-"), num(x.count), cell]);
      tr.dataset.reason = x.reason;
    });
    const g = r.guard;
    $("guard-counts").textContent = "This server's guard: " + whole(g.admitted) + " admitted, " +
      whole(g.refused) + " refused, " + whole(g.unavailable) + " unavailable.";
  }

  // Health from what the server reports: the policy's providers, and any breaker or
  // cooldown series in /metrics.
  async function loadProviders() {
    const policy = await api("/admin/policy");
    const text = await fetch("/metrics").then((r) => (r.ok ? r.text() : ""));
    const health = text.split("\n").filter((l) =>
      /^usage_guard_\w*(breaker|cooldown|cooled|provider_health)\w*/.test(l));
    const box = $("health");
    box.replaceChildren();
    const table = el("table");
    const head = table.createTHead().insertRow();
    ["provider", "base URL", "health"].forEach((h) => head.appendChild(el("th", h)));
    const tbody = table.createTBody();
    policy.providers.forEach((p) => {
      const lines = health.filter((l) => l.includes('"' + p.provider + '"'));
      const tr = row(tbody, [p.provider, p.base_url || "-",
        lines.length ? lines.join("; ") : "not reported"]);
      tr.dataset.provider = p.provider;
    });
    if (!policy.providers.length) clear(tbody, 3, "provider health: not reported (no providers in the policy)");
    const scroll = el("div", null, "scroll");
    scroll.appendChild(table);
    box.appendChild(scroll);
  }

  async function loadUser(name) {
    $("user-title").textContent = name;
    const q = encodeURIComponent(name);
    const c = await api("/admin/dashboard/counters?user=" + q);
    const tbody = $("user-left").tBodies[0];
    clear(tbody, 9, c.counters.length ? null : "No rule applies to this user.");
    c.counters.forEach((p) => {
      p.rules.concat(p.ceilings).forEach((r) => {
        const cells = counterCells(r);
        const tr = row(tbody, [el("td", p.model), cells[0], cells[1], cells[2], cells[5],
          cells[3], cells[4], cells[6], cells[7]]);
        tr.dataset.model = p.model;
      });
    });
    const s = await api("/admin/usage/series?bucket=day&group=model&user=" + q);
    drawChart("user-chart", s.t, s.series.map((x) => ({ key: x.key, values: x.tokens })), "tokens");
  }

  const PAGES = { "": ["usage", loadUsage], rules: ["rules", loadRules],
    refusals: ["refusals", loadRefusals], providers: ["providers", loadProviders] };

  async function route() {
    if (!sessionStorage.getItem(KEY)) { showLogin(""); return; }
    $("login").hidden = true;
    $("sign-out").hidden = false;
    const parts = window.location.hash.replace(/^#\/?/, "").split("/");
    const [id, load] = parts[0] === "user" && parts[1]
      ? ["user", () => loadUser(decodeURIComponent(parts.slice(1).join("/")))]
      : (PAGES[parts[0]] || PAGES[""]);
    document.querySelectorAll("section.page").forEach((s) => { s.hidden = s.id !== id; });
    document.querySelectorAll("nav a").forEach((a) => {
      a.classList.toggle("active", a.getAttribute("href") === "#/" + (id === "usage" ? "" : id));
    });
    status("");
    document.body.dataset.loaded = "";
    try {
      await load();
      document.body.dataset.loaded = id;
    } catch (e) {
      if (e.message !== "signed out") status(e.message);
    }
  }

  function showLogin(message) {
    document.querySelectorAll("section.page").forEach((s) => { s.hidden = true; });
    $("login").hidden = false;
    $("sign-out").hidden = true;
    status(message);
    $("token").focus();
  }

  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, $("token").value);
    $("token").value = "";
    route();
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    Object.keys(charts).forEach((id) => { charts[id].destroy(); delete charts[id]; });
    showLogin("");
  });
  $("user-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const name = $("user-name").value.trim();
    if (name) window.location.hash = "#/user/" + encodeURIComponent(name);
  });
  ["range", "group", "metric"].forEach((id) => $(id).addEventListener("change", route));
  window.addEventListener("hashchange", route);
  takeTokenFromAddress();
  route();
})();
