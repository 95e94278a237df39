// Progressive refresh of the kbear serve console: the page works without this
// script; with it, the sections marked data-refresh are fetched again (the same
// URL, rendered by the server, escaped there) every few seconds and swapped in.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var live = document.getElementById("live");
  function refresh() {
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-KBear-Refresh": "1" } })
      .then(function (response) {
        if (response.redirected || !response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("section[data-refresh]").forEach(function (section) {
          var active = document.activeElement;
          if (active && section.contains(active) && active.matches("input, textarea")) { return; }
          var replacement = fresh.getElementById(section.id);
          if (replacement) {
            var open = Array.prototype.map.call(section.querySelectorAll("details[open]"), function (d) {
              return d.parentNode.getAttribute("data-topic");
            });
            section.replaceWith(replacement);
            replacement.querySelectorAll("details").forEach(function (d) {
              if (open.indexOf(d.parentNode.getAttribute("data-topic")) >= 0) { d.open = true; }
            });
          }
        });
        if (live) { live.hidden = false; live.textContent = "live · " + new Date().toLocaleTimeString(); }
      })
      .catch(function () { if (live) { live.hidden = false; live.textContent = "refresh failed"; } })
      .finally(function () { window.setTimeout(refresh, PERIOD_MS); });
  }
  window.setTimeout(refresh, PERIOD_MS);
})();
