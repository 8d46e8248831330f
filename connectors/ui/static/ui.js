// Keel's operator UI: a little plain JavaScript, no build step.
// Live counts per status on the runs page, SLA countdowns, confirmations.
"use strict";

function shownDuration(ms) {
  const s = Math.floor(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60), r = s % 60;
  const text = d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min ${r} s` : `${r} s`;
  return ms >= 0 ? `in ${text}` : `${text} late`;
}

function tickCountdowns() {
  // the server's clock at render (data-now) plus the time since: no trust in the
  // browser's own clock
  const since = performance.now() - window.keelLoadedAt;
  document.querySelectorAll(".countdown").forEach((el) => {
    const left = Number(el.dataset.at) - (Number(el.dataset.now) + since);
    el.textContent = shownDuration(left);
    el.classList.toggle("late", left < 0);
  });
}

async function refreshCounts(list) {
  try {
    const answer = await fetch(list.dataset.src, { credentials: "same-origin" });
    if (!answer.ok) return;
    const counts = await answer.json();
    let total = 0;
    for (const [status, n] of Object.entries(counts)) {
      total += n;
      const el = list.querySelector(`[data-count="${status}"]`);
      if (el) el.textContent = String(n);
    }
    const all = list.querySelector('[data-count="all"]');
    if (all) all.textContent = String(total);
  } catch (e) {
    // the next tick tries again
  }
}

document.addEventListener("DOMContentLoaded", () => {
  window.keelLoadedAt = performance.now();
  if (document.querySelector(".countdown")) {
    tickCountdowns();
    setInterval(tickCountdowns, 1000);
  }
  const counts = document.getElementById("counts");
  if (counts) setInterval(() => refreshCounts(counts), 3000);
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (ev) => {
      if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
    });
  });
});
