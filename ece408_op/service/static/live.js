// The pages' live parts, by server-sent events (EventSource): the ranking, and a job's place in the
// queue, transcript and verdict. A transcript's lines are added as text nodes, never parsed as markup
// (the server has already written their control characters as escapes); the ranking's table and a
// job's verdict come as HTML that the server rendered from its escaping templates.
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
    job.addEventListener("verdict", function (e) { verdict.innerHTML = JSON.parse(e.data); });
    job.addEventListener("end", function (e) {
      var ended = JSON.parse(e.data);
      job.close();
      status("ended");
      if (state) { state.textContent = ended; state.className = "state state-" + ended; }
      var cancel = document.getElementById("cancel");
      if (cancel) { cancel.remove(); }
    });
    job.addEventListener("error", function () {
      status(job.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting...");
    });
  }
})();
