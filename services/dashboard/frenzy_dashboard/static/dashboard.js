// Live pages. The server renders every page as HTML; this script swaps in the live part that
// the server pushes over server-sent events, and feeds the charts (uPlot). No framework, no build.
(function () {
  "use strict";
  const PALETTE = ["#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#12b5cb", "#f9ab00"];
  const colour = (i) => PALETTE[i % PALETTE.length];

  // chart name -> options for its data (the server sends {data, labels?}).
  const CHARTS = {
    utilisation: (c) => ({
      // Allocation changes at an instant and holds: a step, not a slope.
      series: [{}, ...c.labels.map((label, i) => ({label, stroke: colour(i), width: 2,
                                                   paths: uPlot.paths.stepped({align: 1})}))],
      scales: {x: {time: true}, y: {range: [0, 100]}},
      axes: [{}, {label: "% allocated"}],
    }),
    curve: () => ({
      scales: {x: {time: false}, loss: {}, tps: {}},
      series: [{label: "step"},
               {label: "loss", scale: "loss", stroke: colour(0), width: 2},
               {label: "tokens/s", scale: "tps", stroke: colour(1), width: 1}],
      axes: [{label: "step"}, {scale: "loss", label: "loss"},
             {scale: "tps", side: 1, label: "tokens/s", size: 90, grid: {show: false}}],
    }),
    scatter: () => ({
      scales: {x: {time: false}},
      series: [{label: "measured GiB"},
               {label: "predicted GiB", stroke: colour(0), paths: () => null, points: {show: true, size: 8}},
               {label: "perfect", stroke: "#9aa0a6", dash: [4, 4]}],
      axes: [{label: "measured GiB"}, {label: "predicted GiB"}],
    }),
  };
  const shown = {};  // chart name -> {plot, key}

  function draw(name, chart) {
    const el = document.querySelector(`[data-chart="${name}"]`);
    if (!el || !CHARTS[name]) return;
    const data = name === "scatter" ? [chart.data[0], chart.data[1], chart.data[0]] : chart.data;
    const key = JSON.stringify(chart.labels || []);
    const current = shown[name];
    if (current && current.key === key) {
      current.plot.setData(data);
      return;
    }
    if (current) current.plot.destroy();
    const opts = {width: Math.max(el.clientWidth, 300), height: 220, ...CHARTS[name](chart)};
    shown[name] = {plot: new uPlot(opts, data, el), key};
  }

  function drawAll(charts) {
    for (const [name, chart] of Object.entries(charts || {})) draw(name, chart);
  }

  drawAll(JSON.parse(document.getElementById("charts").textContent));

  const live = document.getElementById("live");
  const linkState = document.getElementById("link-state");
  if (!live || !live.dataset.events) return;
  const source = new EventSource(live.dataset.events);
  source.addEventListener("open", () => linkState.classList.add("up"));
  source.addEventListener("error", () => linkState.classList.remove("up"));
  source.addEventListener("update", (event) => {
    const update = JSON.parse(event.data);
    live.innerHTML = update.html;
    drawAll(update.charts);
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  });
})();
