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
  // when summary.json names another one. The generation is to the
  // nanosecond; the shown stamp, to the second, is the fallback.
  var genEl = document.querySelector("[data-generated]");
  var shown = genEl ? genEl.getAttribute("data-generation") || genEl.textContent : "";
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

  // notice puts the deletion notice at the top of main: what was deleted
  // (noticed now), then rest.
  function notice(main, what, rest) {
    var p = document.createElement("p");
    p.id = "gone";
    p.className = "gone";
    p.setAttribute("role", "alert");
    p.textContent = what + " was deleted (noticed " + new Date().toISOString().replace("T", " ").slice(0, 19) +
      "Z)" + rest;
    main.insertBefore(p, main.firstChild);
    return p;
  }

  // gone marks the open resource (or the whole page) deleted, once.
  function gone(what) {
    var main = document.querySelector("main");
    if (!main || document.getElementById("gone")) { return; }
    notice(main, what, ". Below is its last state.");
    main.classList.add("deleted");
    say(what + " was deleted.");
  }

  // recreated says the open resource was deleted and created anew (a new
  // uid under the same id): the page shows the new one.
  function recreated(what) {
    var main = document.querySelector("main");
    if (kept && kept.parentNode) { kept.parentNode.removeChild(kept); }
    kept = notice(main, what, " and created anew: below is the new one.");
    say(what + " was deleted and created anew.");
  }
  // kept is the "created anew" notice, shown again after later swaps
  // until the page is opened at another resource.
  var kept = null;
  window.addEventListener("hashchange", function () { kept = null; });

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
        var next = rid ? doc.getElementById(t.id) : null;
        if (rid && !next) { gone(rid); shown = gen; return; }
        var anew = rid && next.getAttribute("data-uid") !== t.getAttribute("data-uid");
        ["header", "main"].forEach(function (tag) {
          var now = document.querySelector(tag), next = doc.querySelector(tag);
          if (now && next && now.innerHTML !== next.innerHTML) { now.innerHTML = next.innerHTML; }
        });
        var main = document.querySelector("main");
        if (main) { main.classList.remove("deleted"); }
        if (anew) { recreated(rid); } else if (kept && main) { main.insertBefore(kept, main.firstChild); }
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
        var gen = s.generation || stampOf(s);
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

  // Actions (serve --ui-actions): a panel for the resource at the
  // fragment. GET ui/session answers only when actions are on; a static
  // or read-only site answers 404 and shows no panel.
  var ui = null;
  var panel = null;
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text) { e.textContent = text; }
    return e;
  }
  function call(method, path, data, headers) {
    var h = { "Content-Type": "application/json" };
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    if (ui && ui.csrf) { h["X-CSRF-Token"] = ui.csrf; }
    return fetch(root + path, { method: method, headers: h, credentials: "same-origin", cache: "no-store",
      body: data ? JSON.stringify(data) : undefined })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (j) {
          if (!r.ok) { throw new Error(j.error || ("HTTP " + r.status)); }
          return j;
        });
      });
  }
  function status(text, bad) {
    var st = document.getElementById("ui-status");
    if (st) { st.textContent = text; st.className = bad ? "error" : "note"; }
  }
  function showPanel() {
    if (!ui || !ui.actions) { return; }
    var t = target();
    var rid = t && t.getAttribute("data-id");
    if (!panel) {
      panel = el("aside", { id: "actions", "aria-label": "Actions" });
      var main = document.querySelector("main");
      main.parentNode.insertBefore(panel, main);
    }
    panel.hidden = !rid;
    var key = rid + "|" + ui.signedIn;
    if (!rid || panel.getAttribute("data-for") === key) { return; }
    panel.setAttribute("data-for", key);
    panel.textContent = "";
    panel.appendChild(el("h2", {}, "Actions on " + rid));
    if (!ui.signedIn) {
      var form = el("form", { id: "ui-login" });
      var lab = el("label", { "for": "ui-token" }, "Login token ");
      var tok = el("input", { id: "ui-token", type: "password", autocomplete: "current-password" });
      form.appendChild(lab);
      form.appendChild(tok);
      form.appendChild(el("button", { id: "ui-signin", type: "submit" }, "Sign in"));
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        call("POST", "ui/session", null, { "Authorization": "Bearer " + tok.value })
          .then(function (j) { tok.value = ""; ui = j; showPanel(); status("Signed in."); })
          .catch(function (e) { status("Sign-in failed: " + e.message, true); });
      });
      panel.appendChild(form);
      panel.appendChild(el("p", { id: "ui-status", role: "status" }));
      return;
    }
    var row = el("p");
    var del = el("button", { id: "ui-delete", type: "button" }, "Delete…");
    var verb = el("input", { id: "ui-verb", placeholder: "verb", "aria-label": "Operator verb", size: "12" });
    var args = el("input", { id: "ui-args", placeholder: "key=value, …", "aria-label": "Verb arguments", size: "24" });
    var run = el("button", { id: "ui-run", type: "button" }, "Run verb…");
    var out = el("button", { id: "ui-signout", type: "button" }, "Sign out");
    [del, document.createTextNode(" "), verb, args, run, document.createTextNode(" "), out].forEach(function (e) { row.appendChild(e); });
    panel.appendChild(row);
    var box = el("div", { id: "ui-confirm-box", hidden: "" });
    var ask = el("p", { id: "ui-ask" });
    var conf = el("input", { id: "ui-confirm", "aria-label": "Type the resource's id to confirm", autocomplete: "off", size: "40" });
    var go = el("button", { id: "ui-go", type: "button", disabled: "" }, "Confirm");
    var cancel = el("button", { id: "ui-cancel", type: "button" }, "Cancel");
    [ask, conf, document.createTextNode(" "), go, document.createTextNode(" "), cancel].forEach(function (e) { box.appendChild(e); });
    panel.appendChild(box);
    panel.appendChild(el("p", { id: "ui-status", role: "status" }));
    var pending = null;
    function confirmThen(question, action) {
      pending = action;
      ask.textContent = question + " Type " + rid + " to confirm.";
      conf.value = "";
      go.disabled = true;
      box.hidden = false;
      conf.focus();
    }
    conf.addEventListener("input", function () { go.disabled = conf.value !== rid; });
    cancel.addEventListener("click", function () { box.hidden = true; pending = null; status("Cancelled."); });
    go.addEventListener("click", function () {
      if (conf.value !== rid || !pending) { return; }
      var action = pending;
      pending = null;
      box.hidden = true;
      action(conf.value);
    });
    del.addEventListener("click", function () {
      confirmThen("Delete " + rid + " and everything that depends on it?", function (c) {
        status("Deleting " + rid + "…");
        call("POST", "ui/delete", { id: rid, confirm: c })
          .then(function () { status("Delete of " + rid + " accepted: its dependents go first."); say("Delete of " + rid + " accepted."); })
          .catch(function (e) { status("Delete failed: " + e.message, true); });
      });
    });
    run.addEventListener("click", function () {
      var v = verb.value.trim();
      if (!v) { status("Name a verb first.", true); return; }
      var a = {};
      args.value.split(",").forEach(function (kv) {
        var i = kv.indexOf("=");
        if (i > 0) { a[kv.slice(0, i).trim()] = kv.slice(i + 1).trim(); }
      });
      confirmThen("Run " + v + " on " + rid + "?", function (c) {
        status("Running " + v + "…");
        call("POST", "ui/do", { id: rid, verb: v, args: a, confirm: c })
          .then(function (j) { status(v + ": " + (j.outcome || "done") + (j.message ? ": " + j.message : "")); say(v + " on " + rid + ": " + (j.outcome || "done") + "."); })
          .catch(function (e) { status(v + " failed: " + e.message, true); });
      });
    });
    out.addEventListener("click", function () {
      call("DELETE", "ui/session").then(function (j) { ui = j; showPanel(); })
        .catch(function (e) { status("Sign-out failed: " + e.message, true); });
    });
  }
  fetch(root + "ui/session", { cache: "no-store", credentials: "same-origin" })
    .then(function (r) { return r.ok ? r.json() : null; })
    .then(function (j) { if (j && j.actions) { ui = j; showPanel(); } })
    .catch(function () { /* read-only */ });
  window.addEventListener("hashchange", showPanel);
  named();
  window.addEventListener("hashchange", named);
  poll();
  setInterval(poll, Number(body.getAttribute("data-poll")) || 1000);
})();

// The search box: a resource by kind, name (or its beginning) and phase,
// on a site of any size. search.json names each kind's list pages (in
// name order) and the first name on each: a name is looked up on the
// page that holds it, never in a list of every name. Without a name the
// box opens the list of that kind, phase or both. index.html?r=KIND/NAME
// opens that resource's page (a link by name that works on a static
// host; converge serve also redirects /r/KIND/NAME).
(function () {
  "use strict";
  var root = document.body.getAttribute("data-root") || "";
  var form = document.getElementById("search-form");
  if (!form) { return; }
  var kindSel = document.getElementById("search-kind");
  var nameIn = document.getElementById("search-name");
  var phaseSel = document.getElementById("search-phase");
  var out = document.getElementById("search-results");
  var maxShown = 50, maxPages = 4;
  var index = null;

  function load() {
    if (index) { return Promise.resolve(index); }
    return fetch(root + "search.json", { cache: "no-cache" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (x) { index = x; setTimeout(function () { index = null; }, 5000); return x; });
  }
  function fillKinds(x) {
    var have = {};
    Array.prototype.forEach.call(kindSel.options, function (o) { have[o.value] = true; });
    Object.keys(x.kinds).sort().forEach(function (k) {
      if (!have[k]) { var o = document.createElement("option"); o.value = k; o.textContent = k; kindSel.appendChild(o); }
    });
  }
  // pageOf returns the page (0-based) of kind entry sk holding name: the
  // last whose first name is not after it.
  function pageOf(sk, name) {
    var lo = 0, hi = sk.firsts.length - 1, at = 0;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (sk.firsts[mid] <= name) { at = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return at;
  }
  // rows fetches a list page and returns its rows: id, link, phase.
  function rows(rel) {
    var at = new URL(root + rel, location.href);
    return fetch(at.href, { cache: "no-cache" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var out = [];
        doc.querySelectorAll("main tr").forEach(function (tr) {
          var a = tr.querySelector("td a"), ph = tr.querySelector(".phase");
          if (a) { out.push({ id: a.textContent, href: new URL(a.getAttribute("href"), at).href, phase: ph ? ph.textContent : "" }); }
        });
        return out;
      });
  }
  // find returns up to maxShown resources of kind whose name begins with
  // prefix, in phase ("": any).
  function find(x, kind, prefix, phase) {
    var sk = x.kinds[kind];
    if (!sk || !sk.pages.length) { return Promise.resolve([]); }
    var found = [];
    function from(p, n) {
      if (p >= sk.pages.length || n >= maxPages || found.length >= maxShown) { return Promise.resolve(found); }
      return rows(sk.pages[p]).then(function (rs) {
        var past = false;
        rs.forEach(function (r) {
          var name = r.id.slice(kind.length + 1);
          if (name.indexOf(prefix) === 0) {
            if ((!phase || r.phase === phase) && found.length < maxShown) { found.push(r); }
          } else if (name > prefix) { past = true; }
        });
        return past ? found : from(p + 1, n + 1);
      });
    }
    return from(pageOf(sk, prefix), 0);
  }
  function show(list, what) {
    out.textContent = "";
    var p = document.createElement("p");
    p.id = "search-summary";
    p.textContent = list.length ? (list.length >= maxShown ? "The first " + maxShown : String(list.length)) + " of " + what + ":" : "No " + what + ".";
    out.appendChild(p);
    if (!list.length) { return; }
    var ul = document.createElement("ul");
    list.forEach(function (r) {
      var li = document.createElement("li"), a = document.createElement("a"), ph = document.createElement("span");
      a.href = r.href; a.textContent = r.id;
      ph.className = "phase ph-" + r.phase.toLowerCase(); ph.textContent = r.phase;
      li.appendChild(a); li.appendChild(document.createTextNode(" ")); li.appendChild(ph);
      ul.appendChild(li);
    });
    out.appendChild(ul);
  }
  // search runs the box; exact: open the one resource named exactly.
  function search(exact) {
    var kind = kindSel.value, name = nameIn.value.trim(), phase = phaseSel.value;
    if (name.indexOf("/") > 0 && !kind) { kind = name.slice(0, name.indexOf("/")); name = name.slice(kind.length + 1); }
    return load().then(function (x) {
      fillKinds(x);
      if (!name) {
        var rel = "";
        if (kind && x.kinds[kind]) {
          rel = x.kinds[kind].pages[0];
          if (phase) { rel = rel.replace(/\.html$/, "." + phase.toLowerCase() + ".html"); }
        } else if (phase) {
          rel = "phases/" + phase.toLowerCase() + ".html";
        }
        if (rel) { location.href = root + rel; } else { show([], "resources: give a kind, a name or a phase"); }
        return;
      }
      var kinds = kind ? [kind] : Object.keys(x.kinds).sort();
      return Promise.all(kinds.map(function (k) { return find(x, k, name, phase); })).then(function (lists) {
        var all = [].concat.apply([], lists).slice(0, maxShown);
        if (exact) {
          var hit = all.filter(function (r) { return r.id === kind + "/" + name; });
          if (hit.length === 1) { location.replace(hit[0].href); return; }
        }
        show(all, "resources " + (kind ? kind + "/" : "") + name + "…" + (phase ? " in " + phase : ""));
      });
    }).catch(function (e) { show([], "search index (" + e.message + ")"); });
  }
  form.addEventListener("submit", function (ev) { ev.preventDefault(); search(false); });
  kindSel.addEventListener("focus", function () { load().then(fillKinds).catch(function () {}); });
  // ?r=KIND/NAME opens that resource; ?kind=…&name=…&phase=… runs the
  // box (a search one can link to).
  var qs = new URLSearchParams(location.search), q = qs.get("r");
  if (q) {
    nameIn.value = q;
    search(true);
  } else if (qs.get("name") || qs.get("kind") || qs.get("phase")) {
    load().then(function (x) {
      fillKinds(x);
      kindSel.value = qs.get("kind") || "";
      nameIn.value = qs.get("name") || "";
      phaseSel.value = qs.get("phase") || "";
      search(false);
    }).catch(function () {});
  } else {
    load().then(fillKinds).catch(function () {});
  }
})();
