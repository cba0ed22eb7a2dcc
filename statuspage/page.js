// Replaces the page's main part with a fresh one from the server about
// once a second; the server renders it, charts included.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var every = Number(main.getAttribute("data-every")) || 1000;
  var url = new URL(window.location.href);
  url.searchParams.set("part", "main");
  function show(on, text) {
    live.textContent = text;
    live.className = on ? "on" : "off";
  }
  function poll() {
    fetch(url.toString(), { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        main.innerHTML = html;
        show(true, "live");
      })
      .catch(function (e) { show(false, "paused (" + e.message + "), retrying"); })
      .then(function () { window.setTimeout(poll, every); });
  }
  show(true, "live");
  window.setTimeout(poll, every);
})();
