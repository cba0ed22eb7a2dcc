// Replaces the page's main part with a fresh one from the server about
// once a second; the server renders it, charts included. Clicking "live"
// pauses the updates (to select and copy), clicking again resumes them.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var every = Number(main.getAttribute("data-every")) || 1000;
  var url = new URL(window.location.href);
  url.searchParams.set("part", "main");
  var paused = false;
  var timer = 0;
  function show(on, text) {
    live.textContent = text;
    live.className = on ? "on" : "off";
  }
  function schedule() {
    window.clearTimeout(timer);
    if (!paused) { timer = window.setTimeout(poll, every); }
  }
  function poll() {
    fetch(url.toString(), { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        if (paused) { return; }
        main.innerHTML = html;
        show(true, "live");
      })
      .catch(function (e) { show(false, "paused (" + e.message + "), retrying"); })
      .then(schedule);
  }
  live.addEventListener("click", function () {
    paused = !paused;
    if (paused) { show(false, "paused: click to resume"); } else { show(true, "live"); }
    schedule();
  });
  show(true, "live");
  schedule();
})();
