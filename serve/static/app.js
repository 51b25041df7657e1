// headsearch: the one small script. Pages work without it; it adds dropping a photo, choosing a
// head, and keeping the player at the moment (falling back to a preview clip when needed).
(function () {
  "use strict";
  const form = document.getElementById("search");
  const drop = document.getElementById("drop");
  const input = document.getElementById("photo");
  if (form && drop && input) {
    ["dragenter", "dragover"].forEach((e) => drop.addEventListener(e, (ev) => { ev.preventDefault(); drop.classList.add("over"); }));
    ["dragleave", "drop"].forEach((e) => drop.addEventListener(e, () => drop.classList.remove("over")));
    drop.addEventListener("drop", (ev) => {
      ev.preventDefault();
      if (ev.dataTransfer && ev.dataTransfer.files.length) { input.files = ev.dataTransfer.files; form.requestSubmit(); }
    });
    input.addEventListener("change", () => { if (input.files.length) form.requestSubmit(); });
  }
  document.querySelectorAll("#heads button.head").forEach((button) => {
    button.addEventListener("click", () => {
      document.querySelectorAll("#heads button.head").forEach((b) => b.classList.toggle("chosen", b === button));
      document.querySelectorAll("section.head-results").forEach((s) => { s.hidden = s.dataset.head !== button.dataset.head; });
    });
  });
  // Whole milliseconds never before the frame (as the server's `seek_time`): rounded down, a player shows the frame before.
  const seek = (t) => (Math.max(0, Math.ceil(Math.round(t * 1e6) / 1e3)) / 1000).toFixed(3);
  const player = document.getElementById("player");
  if (player) {
    const start = parseFloat(player.dataset.start), end = parseFloat(player.dataset.end);
    player.addEventListener("loadedmetadata", () => {
      if (Math.abs(player.currentTime - start) > 0.25) player.currentTime = start;
    });
    player.addEventListener("error", () => {
      if (player.dataset.direct !== "1") return;  // already the preview clip
      player.dataset.direct = "0";
      const offset = parseFloat(player.dataset.previewStart);
      player.dataset.start = seek(start - offset);
      player.src = player.dataset.preview + "#t=" + seek(start - offset) + "," + seek(end - offset);
    });
  }
})();
