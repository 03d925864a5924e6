// The pages' live parts, by server-sent events (EventSource): the ranking, and a job's place in the
// queue, elapsed time and step, transcript, verdict, end time and build folder. A transcript's lines
// and a step are added as text, never parsed as markup (the server has already written their control
// characters as escapes); the ranking's table, a job's verdict and its build folder's line come as
// HTML that the server rendered from its escaping templates. The elapsed time counts from the start
// the server gives, by the server's clock (its time at the page's render or the last event).
(function () {
  "use strict";

  function status(text) {
    var s = document.getElementById("live-status");
    if (s) { s.hidden = false; s.textContent = text; }
  }

  function clock() {
    return new Date().toISOString().slice(11, 19) + " UTC";
  }

  var ranking = document.getElementById("ranking");
  if (ranking && ranking.dataset.live) {
    var board = new EventSource(ranking.dataset.live);
    board.addEventListener("open", function () { status("live"); });
    board.addEventListener("ranking", function (e) {
      ranking.innerHTML = JSON.parse(e.data);
      status("live, updated " + clock());
    });
    board.addEventListener("gone", function (e) { board.close(); status(JSON.parse(e.data)); });
    board.addEventListener("error", function () {
      status(board.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting...");
    });
  }

  var pre = document.getElementById("transcript");
  if (pre && pre.dataset.live) {
    var place = document.getElementById("place");
    var verdict = document.getElementById("verdict");
    var notice = document.getElementById("notice");
    var state = document.getElementById("state");
    var progress = document.getElementById("progress");
    var elapsed = document.getElementById("elapsed");
    var step = document.getElementById("step");
    var started = null, skew = 0, ticking = null;

    function duration(seconds) {
      var h = Math.floor(seconds / 3600), m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
      return h ? h + " h " + m + " min" : m ? m + " min " + s + " s" : s + " s";
    }
    function tick() {
      if (started === null || !elapsed) { return; }
      var seconds = Math.max(0, Math.floor((Date.now() + skew) / 1000 - started));
      elapsed.textContent = "Running for " + duration(seconds) + (step && step.textContent ? ":" : "");
    }
    function running(startedAt, serverNow) {
      if (startedAt === null || startedAt === undefined || startedAt === "") { return; }
      started = Number(startedAt);
      skew = Number(serverNow) * 1000 - Date.now();
      if (progress) { progress.hidden = false; }
      tick();
      if (ticking === null) { ticking = window.setInterval(tick, 1000); }
    }
    function setState(name) {
      if (state) { state.textContent = name; state.className = "state state-" + name; }
    }
    if (elapsed && elapsed.dataset.started) { running(elapsed.dataset.started, elapsed.dataset.now); }

    var job = new EventSource(pre.dataset.live);
    job.addEventListener("open", function () { status("live"); });
    job.addEventListener("line", function (e) {
      var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.appendChild(document.createTextNode(JSON.parse(e.data)));
      if (atEnd) { pre.scrollTop = pre.scrollHeight; }
      notice.hidden = true;
    });
    job.addEventListener("place", function (e) {
      var text = JSON.parse(e.data);
      place.textContent = text;
      place.hidden = !text;
      if (text && state) { state.textContent = "queued"; state.className = "state state-queued"; }
      if (!text && state && state.textContent === "queued") { state.textContent = "running"; state.className = "state state-running"; }
    });
    job.addEventListener("notice", function (e) { notice.textContent = JSON.parse(e.data); notice.hidden = false; });
    job.addEventListener("progress", function (e) {
      var data = JSON.parse(e.data);
      if (step) { step.textContent = data.step || ""; }
      var since = document.getElementById("started");
      if (since && data.started && !since.textContent) { since.textContent = ", started " + data.started; }
      if (state && state.textContent !== "running") { setState("running"); }
      running(data.started_at, data.now);
    });
    job.addEventListener("verdict", function (e) { verdict.innerHTML = JSON.parse(e.data); });
    job.addEventListener("ended", function (e) {
      var data = JSON.parse(e.data);
      var when = document.getElementById("ended");
      if (when && data.ended) { when.textContent = ", ended " + data.ended; }
      var build = document.getElementById("build-folder");
      if (build) { build.innerHTML = data.build; }
    });
    job.addEventListener("end", function (e) {
      var ended = JSON.parse(e.data);
      job.close();
      status("ended");
      setState(ended);
      if (ticking !== null) { window.clearInterval(ticking); ticking = null; }
      if (progress) { progress.hidden = true; }
      var cancel = document.getElementById("cancel");
      if (cancel) { cancel.remove(); }
    });
    job.addEventListener("error", function () {
      status(job.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting...");
    });
  }
})();
