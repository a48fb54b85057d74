// Polls summary.json and updates counts in place; no framework, no reload.
(function () {
  "use strict";
  var body = document.body;
  var root = body.getAttribute("data-root") || "";
  var fields = ["total", "ready", "failed", "pending", "running", "deleting"];
  function poll() {
    fetch(root + "summary.json", { cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (s) {
        var c = s.counts || {};
        fields.forEach(function (f) {
          document.querySelectorAll('[data-count="' + f + '"]').forEach(function (e) {
            e.textContent = String(c[f] || 0);
          });
        });
        var byID = {};
        (s.roots || []).forEach(function (r) { byID[r.id] = r; });
        document.querySelectorAll("[data-rollup]").forEach(function (e) {
          var r = byID[e.getAttribute("data-rollup")];
          if (!r) { return; }
          var f = e.getAttribute("data-field");
          if (f === "phase") {
            e.textContent = r.phase;
            e.className = "phase ph-" + String(r.phase).toLowerCase();
          } else {
            e.textContent = String((r.rollup || {})[f] || 0);
          }
        });
        document.querySelectorAll("[data-generated]").forEach(function (e) { e.textContent = String(s.generated).replace("T", " "); });
        var rev = body.getAttribute("data-revision");
        var stale = document.getElementById("stale");
        if (stale && s.revision && s.revision !== rev) { stale.hidden = false; }
      })
      .catch(function () { /* file:// or server gone: keep the rendered counts */ });
  }
  // A resource page holds a shard of its kind; the CSS shows the section
  // at the fragment alone, and the tab is named after it.
  var pageTitle = document.title;
  function named() {
    var id = decodeURIComponent(location.hash.slice(1));
    var s = id ? document.getElementById(id) : null;
    var rid = s && s.getAttribute("data-id");
    document.title = rid ? rid + pageTitle.slice(pageTitle.indexOf(" · ")) : pageTitle;
  }
  named();
  window.addEventListener("hashchange", named);
  poll();
  setInterval(poll, 3000);
})();
