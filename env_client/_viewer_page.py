"""The HTML, CSS and JavaScript of ``medagentgym view`` (:mod:`medagentgym.env_client.viewer` fills in the title and data).

Every element showing run data is built with ``textContent``; nothing from the run reaches ``innerHTML``. The
Content-Security-Policy forbids loading anything (scripts, styles, images, fonts, connections) from elsewhere.
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'none'; connect-src 'none'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  :root { --row: 24px; font-family: system-ui, sans-serif; font-size: 13px; color: #1d2330; }
  body { margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 12px; background: #f3f5f9; border-bottom: 1px solid #d5dae3; }
  header h1 { font-size: 15px; margin: 0 0 4px 0; }
  #meta { color: #4a5363; margin-bottom: 6px; }
  .filters { display: flex; gap: 8px; flex-wrap: wrap; align-items: center; }
  .filters select, .filters input { font-size: 12px; padding: 2px 4px; max-width: 260px; }
  #count { margin-left: auto; color: #4a5363; }
  main { flex: 1; display: flex; min-height: 0; }
  #list { width: 46%; overflow-y: auto; border-right: 1px solid #d5dae3; position: relative; }
  #spacer { position: relative; }
  .row { position: absolute; left: 0; right: 0; height: var(--row); line-height: var(--row); display: flex;
         gap: 6px; padding: 0 8px; cursor: pointer; border-bottom: 1px solid #eef0f4; white-space: nowrap; }
  .row:hover { background: #eef3ff; }
  .row.sel { background: #dce7ff; }
  .row span { overflow: hidden; text-overflow: ellipsis; }
  .c-id { width: 32%; } .c-f { width: 15%; } .c-o { width: 14%; } .c-r { width: 8%; text-align: right; }
  .c-t { width: 6%; text-align: right; } .c-v { flex: 1; color: #4a5363; padding-left: 6px; }
  .listhead { position: sticky; top: 0; z-index: 1; background: #fff; font-weight: 600; display: flex; gap: 6px;
              padding: 0 8px; height: var(--row); line-height: var(--row); border-bottom: 1px solid #d5dae3; }
  .o-correct { color: #17663a; } .o-wrong { color: #a1261c; } .o-truncated, .o-no-submission { color: #8a5a00; }
  .o-grader-error, .o-failed-to-run { color: #6b2a8f; }
  #detail { flex: 1; overflow-y: auto; padding: 10px 14px; }
  #detail h2 { font-size: 14px; margin: 0 0 6px 0; word-break: break-all; }
  .facts { color: #4a5363; margin-bottom: 8px; }
  .box { border: 1px solid #d5dae3; border-radius: 4px; margin: 6px 0; }
  .box > .label { background: #f3f5f9; padding: 3px 8px; font-weight: 600; border-bottom: 1px solid #d5dae3; }
  pre { margin: 0; padding: 6px 8px; white-space: pre-wrap; word-break: break-word; font-size: 12px;
        font-family: ui-monospace, monospace; max-height: 420px; overflow: auto; }
  pre.code { background: #fbfbf4; } pre.obs { background: #f6f8fb; }
  .verdict.correct { border-color: #6cbf8b; } .verdict.incorrect { border-color: #d98a84; }
  details summary { cursor: pointer; padding: 3px 8px; color: #4a5363; }
  .empty { color: #7a8291; padding: 20px; }
</style>
</head>
<body>
<header>
  <h1>__TITLE__</h1>
  <div id="meta"></div>
  <div class="filters">
    <label>family <select id="family"><option value="">all</option></select></label>
    <label>outcome <select id="outcome"><option value="">all</option></select></label>
    <label>verdict <select id="verdict"><option value="">all</option></select></label>
    <label>search <input id="q" type="search" placeholder="task id or verdict text"></label>
    <span id="count"></span>
  </div>
</header>
<main>
  <div id="list">
    <div class="listhead"><span class="c-id">task</span><span class="c-f">family</span><span class="c-o">outcome</span>
      <span class="c-r">reward</span><span class="c-t">turns</span><span class="c-v">verdict</span></div>
    <div id="spacer"></div>
  </div>
  <div id="detail"><div class="empty">Select an episode.</div></div>
</main>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const started = performance.now();
const D = JSON.parse(document.getElementById("data").textContent);
const E = D.episodes, S = D.strings, ROW = 24;
const $ = (id) => document.getElementById(id);
const list = $("list"), spacer = $("spacer"), detail = $("detail");
const sel = { family: $("family"), outcome: $("outcome"), verdict: $("verdict") };
let shown = [], current = -1;

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function options(select, values) {
  for (const v of values) { const o = el("option", null, v); o.value = v; select.appendChild(o); }
}
function slug(o) { return "o-" + o.replace(/ /g, "-"); }
function reward(r) { return r === null || r === undefined ? "" : Number(r).toFixed(2); }

options(sel.family, D.families); options(sel.outcome, D.outcomes); options(sel.verdict, D.verdicts);
(function meta() {
  const m = D.meta || {}, parts = [];
  if (m.policy) parts.push("policy " + m.policy);
  if (typeof m.success_rate === "number") {
    let s = "success " + (100 * m.success_rate).toFixed(1) + " %";
    if (Array.isArray(m.ci95)) s += " (95 % CI " + (100 * m.ci95[0]).toFixed(1) + "-" + (100 * m.ci95[1]).toFixed(1) + " %)";
    parts.push(s);
  }
  parts.push(E.length + " episodes");
  if (D.unreadable) parts.push(D.unreadable + " unreadable lines skipped");
  if (m.source) parts.push(m.source);
  $("meta").textContent = parts.join(" · ");
})();

function applyFilters(keepScroll) {
  const f = sel.family.value, o = sel.outcome.value, v = sel.verdict.value, q = $("q").value.toLowerCase();
  shown = [];
  for (let i = 0; i < E.length; i++) {
    const e = E[i];
    if ((f && e.f !== f) || (o && e.o !== o) || (v && e.vk !== v)) continue;
    if (q && !(e.id.toLowerCase().includes(q) || e.v.toLowerCase().includes(q))) continue;
    shown.push(i);
  }
  $("count").textContent = shown.length + " of " + E.length + " episodes";
  spacer.style.height = (shown.length * ROW) + "px";
  if (!keepScroll) list.scrollTop = 0;
  renderRows();
  writeHash();
}

function renderRows() {
  const top = Math.max(0, list.scrollTop - ROW), height = list.clientHeight || 800;
  const first = Math.max(0, Math.floor(top / ROW) - 5);
  const last = Math.min(shown.length, Math.ceil((top + height) / ROW) + 5);
  const rows = [];
  for (let j = first; j < last; j++) {
    const i = shown[j], e = E[i];
    const r = el("div", "row " + (i === current ? "sel" : ""));
    r.style.top = (j * ROW) + "px";
    r.dataset.i = i;
    r.appendChild(el("span", "c-id", e.id + (e.k ? " #" + e.k : "")));
    r.appendChild(el("span", "c-f", e.f));
    r.appendChild(el("span", "c-o " + slug(e.o), e.o));
    r.appendChild(el("span", "c-r", reward(e.rw)));
    r.appendChild(el("span", "c-t", e.t));
    r.appendChild(el("span", "c-v", e.v));
    rows.push(r);
  }
  spacer.replaceChildren(...rows);
}

function box(label, text, cls) {
  const b = el("div", "box");
  b.appendChild(el("div", "label", label));
  b.appendChild(el("pre", cls || "", text));
  return b;
}

function openEpisode(i) {
  const e = E[i];
  if (!e) return;
  current = i;
  const parts = [];
  const h = el("h2", null, e.id + (e.k ? " (sample " + e.k + ")" : ""));
  parts.push(h);
  const facts = el("div", "facts");
  facts.appendChild(el("span", slug(e.o), e.o));
  facts.appendChild(el("span", null, " · family " + e.f + " · reward " + reward(e.rw) + " · " + e.t +
                       " turn(s)" + (e.end ? " · ended: " + e.end : "")));
  parts.push(facts);
  const verdict = el("div", "box verdict " + (e.o === "correct" ? "correct" : "incorrect"));
  verdict.appendChild(el("div", "label", "Grader's verdict"));
  verdict.appendChild(el("pre", null, (e.v || "(no verdict)") + (e.ve ? "\nerror: " + e.ve : "")));
  parts.push(verdict);
  const prompt = el("details");
  prompt.appendChild(el("summary", null, "Prompt (" + e.p.length + " message(s))"));
  for (const [role, ref] of e.p) prompt.appendChild(box(role, S[ref], "obs"));
  prompt.open = true;
  parts.push(prompt);
  e.st.forEach((s, n) => {
    const step = el("div", "box step");
    step.appendChild(el("div", "label", "Turn " + (n + 1) + " · " + s.a + (s.s ? " · " + s.s : "") +
                        (s.ek ? " (" + s.ek + ")" : "")));
    if (s.c) step.appendChild(el("pre", "code", s.c));
    if (s.pe) step.appendChild(el("pre", "obs", "parse error: " + s.pe));
    if (s.r) {
      const raw = el("details");
      raw.appendChild(el("summary", null, "model output (raw)"));
      raw.appendChild(el("pre", "code", s.r));
      step.appendChild(raw);
    }
    step.appendChild(el("div", "label", "Observation"));
    step.appendChild(el("pre", "obs", s.o));
    parts.push(step);
  });
  detail.replaceChildren(...parts);
  detail.scrollTop = 0;
  renderRows();
  writeHash();
}

function writeHash() {
  const p = new URLSearchParams();
  for (const [k, s] of Object.entries(sel)) if (s.value) p.set(k, s.value);
  if ($("q").value) p.set("q", $("q").value);
  if (current >= 0) p.set("episode", String(current));
  const hash = p.toString();
  if (hash !== location.hash.slice(1)) history.replaceState(null, "", hash ? "#" + hash : location.pathname);
}

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  for (const [k, s] of Object.entries(sel)) {
    const v = p.get(k) || "";
    s.value = [...s.options].some((o) => o.value === v) ? v : "";
  }
  $("q").value = p.get("q") || "";
  applyFilters();
  const ep = p.get("episode");
  if (ep !== null && E[Number(ep)]) openEpisode(Number(ep));
}

for (const s of Object.values(sel)) s.addEventListener("change", () => applyFilters());
$("q").addEventListener("input", () => applyFilters());
list.addEventListener("scroll", () => requestAnimationFrame(renderRows));
spacer.addEventListener("click", (ev) => {
  const row = ev.target.closest(".row");
  if (row) openEpisode(Number(row.dataset.i));
});
document.addEventListener("keydown", (ev) => {
  if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT" || !shown.length) return;
  const at = shown.indexOf(current);
  if (ev.key === "j" || ev.key === "ArrowDown") openEpisode(shown[Math.min(shown.length - 1, at + 1)]);
  if (ev.key === "k" || ev.key === "ArrowUp") openEpisode(shown[Math.max(0, at - 1)]);
});
window.addEventListener("resize", renderRows);
readHash();
document.body.dataset.ready = "1";
document.body.dataset.renderMs = String(Math.round(performance.now() - started));
</script>
</body>
</html>
"""
