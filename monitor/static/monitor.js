// spool monitor: the live parts of the pages. No dependencies; every piece
// of HTML inserted here was rendered (and escaped) by the server.
(function () {
  "use strict";
  var poll = parseInt(document.body.dataset.poll, 10) || 1000;

  // busy reports whether someone is filling in a form of el (a field has
  // the focus, or text other than the page gave it): its section is not
  // swapped meanwhile.
  var busy = function (el) {
    var a = document.activeElement;
    if (a && a !== document.body && el.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) { return true; }
    return Array.prototype.some.call(el.querySelectorAll("textarea, input:not([type=hidden]):not([type=checkbox])"),
      function (f) { return f.value !== f.defaultValue; });
  };

  // Thread, list and approvals pages: while anything shown still runs,
  // fetch the page again and swap its live section (not while a form in
  // it is being filled in).
  var live = document.getElementById("live");
  if (live && live.dataset.running === "true") {
    var refresh = function () {
      if (busy(live)) { setTimeout(refresh, poll); return; }
      fetch(location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}, cache: "no-store"})
        .then(function (r) {
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.text();
        })
        .then(function (html) {
          var next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
          if (!next) { return; }
          if (busy(live)) { setTimeout(refresh, poll); return; }
          live.innerHTML = next.innerHTML;
          live.dataset.running = next.dataset.running;
          if (next.dataset.running === "true") { setTimeout(refresh, poll); }
        })
        .catch(function () { setTimeout(refresh, poll * 3); });
    };
    setTimeout(refresh, poll);
  }

  // Transcript page: what the model writes as it writes it (the turn in
  // flight), from the monitor's deltas stream, until the turn's durable
  // events arrive.
  var writing = document.getElementById("writing");
  var es = null;
  if (writing && window.EventSource) {
    var key = "", calls = {};
    var textEl = writing.querySelector(".text"), callsEl = writing.querySelector(".calls"), turnEl = writing.querySelector(".turn");
    es = new EventSource(writing.dataset.api);
    es.addEventListener("delta", function (m) {
      var d = JSON.parse(m.data);
      var k = d.turn + "/" + (d.attempt || 0);
      if (k !== key) {
        key = k; calls = {};
        textEl.textContent = ""; callsEl.replaceChildren();
        turnEl.textContent = String(d.turn);
      }
      if (d.call_id) {
        var c = calls[d.call_id];
        if (!c) {
          c = document.createElement("pre");
          c.className = "call";
          c.textContent = "→ " + d.tool + " ";
          calls[d.call_id] = c;
          callsEl.appendChild(c);
        }
        c.textContent += d.text;
      } else {
        textEl.textContent += d.text;
      }
      writing.hidden = false;
    });
  }

  // Transcript page: ask for the events after the last one shown.
  var events = document.getElementById("events");
  if (events && events.dataset.done !== "true") {
    var status = document.getElementById("status");
    var follow = document.getElementById("follow");
    var next = function () {
      fetch(events.dataset.api + "?after=" + encodeURIComponent(events.dataset.after),
            {credentials: "same-origin", cache: "no-store"})
        .then(function (r) {
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.json();
        })
        .then(function (d) {
          var atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
          d.events.forEach(function (ev) {
            if (ev.html) { events.insertAdjacentHTML("beforeend", ev.html); }
            // The turn is durable: its text is in the events now.
            if (writing && ev.event_type === "cognition_out") { writing.hidden = true; }
          });
          events.dataset.after = String(d.next);
          if (status) {
            var b = document.createElement("span");
            b.className = "badge st-" + d.status;
            b.textContent = d.status;
            status.replaceChildren(b);
          }
          if (d.events.length && atBottom) { window.scrollTo(0, document.body.scrollHeight); }
          if (d.done) {
            events.dataset.done = "true";
            if (es) { es.close(); }
            if (writing) { writing.hidden = true; }
            if (follow) { follow.textContent = d.warning ? "The transcript stops here: " + d.warning : "End of transcript."; }
            return;
          }
          setTimeout(next, poll);
        })
        .catch(function () { setTimeout(next, poll * 3); });
    };
    setTimeout(next, poll);
  }
})();
