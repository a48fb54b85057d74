// Keeps an open page current without a reload: polls summary.json, updates
// the counts in place, and when the site changed fetches this page again
// and swaps in its header and main. A resource deleted while its page is
// open keeps its last state under a notice. No framework.
(function () {
  "use strict";
  var body = document.body;
  var root = body.getAttribute("data-root") || "";
  var fields = ["total", "ready", "failed", "pending", "running", "deleting"];
  var live = document.getElementById("live");
  var last = null; // the summary last applied
  // shown is the generation of the page's content: a page is refetched
  // when summary.json names a newer one.
  var genEl = document.querySelector("[data-generated]");
  var shown = genEl ? genEl.textContent : "";
  var refreshing = false;

  function say(text) {
    if (live && live.textContent !== text) { live.textContent = text; }
  }
  function countsText(c) {
    return (c.ready || 0) + " ready, " + (c.failed || 0) + " failed, " + (c.pending || 0) + " pending, " +
      (c.running || 0) + " running, " + (c.deleting || 0) + " deleting, of " + (c.total || 0) + " resources";
  }

  // apply puts summary s into the page's counts, rollups and stamps.
  function apply(s) {
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
    document.querySelectorAll("[data-generated]").forEach(function (e) { e.textContent = stampOf(s); });
  }
  function stampOf(s) { return String(s.generated).replace("T", " "); }

  // target is the resource the page is opened at (its fragment), if any.
  function target() {
    var id = decodeURIComponent(location.hash.slice(1));
    return id ? document.getElementById(id) : null;
  }

  // gone marks the open resource (or the whole page) deleted, once.
  function gone(what) {
    var main = document.querySelector("main");
    if (!main || document.getElementById("gone")) { return; }
    var p = document.createElement("p");
    p.id = "gone";
    p.className = "gone";
    p.setAttribute("role", "alert");
    p.textContent = what + " was deleted (noticed " + new Date().toISOString().replace("T", " ").slice(0, 19) +
      "Z). Below is its last state.";
    main.insertBefore(p, main.firstChild);
    main.classList.add("deleted");
    say(what + " was deleted.");
  }

  // refresh fetches this page again and swaps in its header and main.
  function refresh(gen) {
    if (refreshing) { return; }
    refreshing = true;
    var t = target();
    var rid = t && t.getAttribute("data-id");
    fetch(location.pathname + location.search, { cache: "no-cache" })
      .then(function (r) {
        if (r.status === 404) { gone(rid || "Everything on this page"); shown = gen; return null; }
        if (!r.ok) { throw new Error(r.status); }
        return r.text();
      })
      .then(function (text) {
        if (text === null) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        if (rid && !doc.getElementById(t.id)) { gone(rid); shown = gen; return; }
        ["header", "main"].forEach(function (tag) {
          var now = document.querySelector(tag), next = doc.querySelector(tag);
          if (now && next && now.innerHTML !== next.innerHTML) { now.innerHTML = next.innerHTML; }
        });
        var main = document.querySelector("main");
        if (main) { main.classList.remove("deleted"); }
        var rev = doc.body && doc.body.getAttribute("data-revision");
        if (rev !== null) { body.setAttribute("data-revision", rev); }
        shown = gen;
        if (last) { apply(last); } // summary.json may be newer than the page
        document.dispatchEvent(new Event("converge:updated"));
      })
      .catch(function () { /* server gone: keep what is shown */ })
      .then(function () { refreshing = false; });
  }

  function poll() {
    fetch(root + "summary.json", { cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (s) {
        var shownCounts = fields.map(function (f) {
          var e = document.querySelector('[data-count="' + f + '"]');
          return e ? e.textContent : "";
        }).join();
        last = s;
        apply(s);
        var c = s.counts || {};
        if (shownCounts !== fields.map(function (f) { return String(c[f] || 0); }).join()) {
          say("Updated: " + countsText(c) + ".");
        }
        var gen = stampOf(s);
        if (gen !== shown) { refresh(gen); }
      })
      .catch(function () { /* file:// or server gone: keep the rendered counts */ });
  }
  // A resource page holds a shard of its kind; the CSS shows the section
  // at the fragment alone, and the tab is named after it.
  var pageTitle = document.title;
  function named() {
    var s = target();
    var rid = s && s.getAttribute("data-id");
    document.title = rid ? rid + pageTitle.slice(pageTitle.indexOf(" · ")) : pageTitle;
  }
  named();
  window.addEventListener("hashchange", named);
  poll();
  setInterval(poll, Number(body.getAttribute("data-poll")) || 2000);
})();
