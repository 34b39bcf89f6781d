// spool monitor, added to asynqmon's pages: a bar back to the thread views
// (on a task's page, to the thread it activates), and task ids with
// slashes escaped in asynqmon's routes. No dependencies.
(function () {
  "use strict";
  var root = (window.FLAG_ROOT_PATH || "/asynq").replace(/\/$/, "");
  var taskPath = new RegExp("^" + root.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") + "/queues/([^/]+)/tasks/(.+)$");

  // asynqmon builds a task's path without escaping its id: a thread id's
  // slash then splits it and no route matches. Escape it as one segment.
  var fix = function (url) {
    if (typeof url !== "string") { return url; }
    var a = document.createElement("a");
    a.href = url;
    var m = taskPath.exec(a.pathname);
    if (!m || m[2].indexOf("/") < 0) { return url; }
    try {
      return root + "/queues/" + m[1] + "/tasks/" + encodeURIComponent(decodeURIComponent(m[2])) + a.search + a.hash;
    } catch (e) { return url; }
  };
  // The bar.
  var bar, threadLink;
  var update = function () {
    if (!threadLink) { return; }
    var m = taskPath.exec(location.pathname);
    if (!m) { threadLink.hidden = true; return; }
    // A task id is its thread's id, or "<thread id>@<reason>-<seq>" for a
    // later activation.
    var id = decodeURIComponent(m[2]).split("@")[0];
    threadLink.href = "/threads/" + id.split("/").map(encodeURIComponent).join("/");
    threadLink.textContent = "Thread " + id + " →";
    threadLink.hidden = false;
  };
  ["pushState", "replaceState"].forEach(function (name) {
    var orig = history[name];
    history[name] = function (state, title, url) {
      var r = orig.call(history, state, title, fix(url));
      update();
      return r;
    };
  });
  var here = fix(location.pathname + location.search + location.hash);
  if (here !== location.pathname + location.search + location.hash) { history.replaceState(history.state, "", here); }

  var build = function () {
    bar = document.createElement("nav");
    bar.id = "spool-bar";
    bar.setAttribute("aria-label", "spool");
    var add = function (href, text) {
      var a = document.createElement("a");
      a.href = href;
      a.textContent = text;
      bar.appendChild(a);
      return a;
    };
    add("/", "← spool threads").className = "brand";
    add("/approvals", "Approvals");
    threadLink = add("/", "");
    threadLink.className = "thread";
    document.body.appendChild(bar);
    update();
  };
  window.addEventListener("popstate", function () { update(); });
  if (document.body) { build(); } else { document.addEventListener("DOMContentLoaded", build); }
})();
