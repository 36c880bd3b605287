// The job page's live part: follows the server-sent events of /jobs/<job>/stream.
// It writes text with textContent and moves SVG shapes with setAttribute only: nothing
// from a stream is ever parsed as markup. The sections below are HTML the server
// rendered and escaped; they are swapped in whole after a run event.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var STATES = ["ok", "error", "pending"];
  var BAR_W = 1000, CHART_W = 600, CHART_H = 160, KEEP = 600;
  var refreshing = (live.getAttribute("data-refreshing") || "").split(" ");
  var series = [];
  // the sections' next reload: when it is due, whether one is loading, and the delay
  // of a reload asked for while one was loading (it may have read too early)
  var sectionsTimer = null, sectionsDue = 0, sectionsBusy = false, sectionsAgain = null;

  function setText(el, value) {
    if (el) { el.textContent = (value === null || value === undefined) ? "\u2013" : String(value); }
  }

  function drawBar(svg, counts) {
    var total = 0;
    STATES.forEach(function (s) { total += counts[s] || 0; });
    var x = 0;
    STATES.forEach(function (s) {
      var rect = svg.querySelector('rect[data-s="' + s + '"]');
      var w = total ? BAR_W * (counts[s] || 0) / total : 0;
      if (rect) {
        rect.setAttribute("x", x.toFixed(1));
        rect.setAttribute("width", w.toFixed(1));
      }
      x += w;
    });
  }

  function newKindRow(kind) {
    // a kind the page did not have yet: a copy of the shape the server renders
    var tr = document.createElement("tr");
    tr.setAttribute("data-kind", kind);
    var name = document.createElement("td");
    name.textContent = kind;
    tr.appendChild(name);
    var barCell = document.createElement("td");
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "bar");
    svg.setAttribute("viewBox", "0 0 " + BAR_W + " 10");
    svg.setAttribute("preserveAspectRatio", "none");
    var colours = {ok: "#2e7d32", error: "#c62828", pending: "#9e9e9e"};
    STATES.forEach(function (s) {
      var r = document.createElementNS(ns, "rect");
      r.setAttribute("data-s", s);
      r.setAttribute("y", "0");
      r.setAttribute("height", "10");
      r.setAttribute("fill", colours[s]);
      svg.appendChild(r);
    });
    barCell.appendChild(svg);
    tr.appendChild(barCell);
    ["ok", "pending", "error", "total"].forEach(function (s) {
      var td = document.createElement("td");
      td.className = "num";
      td.setAttribute("data-k", kind);
      td.setAttribute("data-s", s);
      tr.appendChild(td);
    });
    document.getElementById("kinds").appendChild(tr);
    return tr;
  }

  function drawChart() {
    var line = document.getElementById("rate-line");
    if (!line) { return; }
    if (series.length < 2) { line.setAttribute("points", ""); return; }
    var t0 = series[0][0], t1 = series[series.length - 1][0];
    var top = 0;
    series.forEach(function (p) { if (p[1] > top) { top = p[1]; } });
    var span = (t1 - t0) || 1, scale = top || 1;
    var pts = series.map(function (p) {
      return ((p[0] - t0) / span * CHART_W).toFixed(1) + "," +
        (CHART_H - 4 - p[1] / scale * (CHART_H - 24)).toFixed(1);
    });
    line.setAttribute("points", pts.join(" "));
    setText(document.getElementById("rate-max"), "max " + top + "/s");
  }

  function onProgress(p) {
    var st = p.rows.by_status;
    setText(live.querySelector('[data-v="ok"]'), st.ok);
    setText(live.querySelector('[data-v="pending"]'), st.pending);
    setText(live.querySelector('[data-v="error"]'), st.error);
    setText(live.querySelector('[data-v="rows"]'), p.rows.total);
    setText(live.querySelector('[data-v="items"]'), p.items.total);
    setText(live.querySelector('[data-v="requests"]'), p.requests);
    setText(live.querySelector('[data-v="pages_per_s"]'), p.pages_per_s);
    setText(live.querySelector('[data-v="eta"]'), p.eta);
    var running = live.querySelector('[data-v="running"]');
    if (running) { running.hidden = !p.crawl_running; }
    Object.keys(p.rows.by_kind).forEach(function (kind) {
      var c = p.rows.by_kind[kind];
      var tr = null;
      document.querySelectorAll("#kinds tr").forEach(function (row) {
        if (row.getAttribute("data-kind") === kind) { tr = row; }
      });
      if (!tr) { tr = newKindRow(kind); }
      ["ok", "pending", "error", "total"].forEach(function (s) {
        tr.querySelectorAll("td[data-s]").forEach(function (td) {
          if (td.getAttribute("data-s") === s) { setText(td, c[s]); }
        });
      });
      drawBar(tr.querySelector("svg"), c);
    });
    if (p.point) {
      var last = series.length ? series[series.length - 1][0] : null;
      if (last === null || p.point[0] > last) { series.push(p.point); }
      while (series.length > KEEP) { series.shift(); }
      drawChart();
    }
    live.setAttribute("data-updated", String(p.time));
    if (p.crawl_running) { refreshSections(10000); }
  }

  function onLog(record) {
    var list = document.getElementById("events");
    var li = document.createElement("li");
    var t = document.createElement("span"); t.className = "t"; t.textContent = record.time || "";
    var ev = document.createElement("span"); ev.className = "ev"; ev.textContent = record.event || "";
    var d = document.createElement("span"); d.className = "d";
    var detail = {};
    Object.keys(record).forEach(function (k) {
      if (k !== "time" && k !== "event" && k !== "job") { detail[k] = record[k]; }
    });
    var text = JSON.stringify(detail);
    d.textContent = text.length > 200 ? text.slice(0, 199) + "\u2026" : text;
    li.appendChild(t); li.appendChild(document.createTextNode(" "));
    li.appendChild(ev); li.appendChild(document.createTextNode(" "));
    li.appendChild(d);
    list.appendChild(li);
    while (list.children.length > 20) { list.removeChild(list.firstElementChild); }
    if (refreshing.indexOf(record.event) >= 0) { refreshSections(500); }
  }

  function refreshSections(delay) {
    // the sooner of two requests wins: a run's end (500 ms) is not kept waiting behind
    // the periodic reload a running crawl asked for (10 s)
    if (sectionsBusy) {
      sectionsAgain = sectionsAgain === null ? delay : Math.min(sectionsAgain, delay);
      return;
    }
    var due = Date.now() + delay;
    if (sectionsTimer !== null) {
      if (due >= sectionsDue) { return; }
      window.clearTimeout(sectionsTimer);
    }
    sectionsDue = due;
    sectionsTimer = window.setTimeout(loadSections, delay);
  }

  function loadSections() {
    sectionsTimer = null;
    sectionsBusy = true;
    fetch(live.getAttribute("data-sections"), {cache: "no-store"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        // server-rendered, escaped HTML of the same origin
        if (html !== null) { document.getElementById("sections").innerHTML = html; }
      })
      .catch(function () { /* the next event tries again */ })
      .then(function () {
        sectionsBusy = false;
        if (sectionsAgain !== null) {
          var again = sectionsAgain;
          sectionsAgain = null;
          refreshSections(again);
        }
      });
  }

  var url = live.getAttribute("data-stream") + "?after=" + live.getAttribute("data-cursor");
  var source = new EventSource(url);
  source.addEventListener("series", function (m) { series = JSON.parse(m.data); drawChart(); });
  source.addEventListener("progress", function (m) { onProgress(JSON.parse(m.data)); });
  source.addEventListener("log", function (m) { onLog(JSON.parse(m.data)); });
  source.addEventListener("open", function () { live.setAttribute("data-connected", "yes"); });
  source.addEventListener("error", function () { live.setAttribute("data-connected", "no"); });
})();
