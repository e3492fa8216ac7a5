// The status page follows its unfinished dream requests (rows with data-following) until they
// finish: it asks /ui/status/dreams/ID every two seconds and shows each run as it ends, with no
// reload. No build step, no library; without script the page shows them on the next load.
"use strict";

const EVERY_MS = 2000;
const REQUEST_BADGE = { done: "applied", failed: "failed" };

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text) made.textContent = text;
  return made;
}

function runItem(run) {
  const item = element("li");
  item.append(element("strong", "", run.job), " ");
  const badge = element("span", `badge tone-${run.tone}`, run.status);
  if (run.record_id) {
    const link = element("a");
    link.href = `/ui/runs/${run.record_id}`;
    link.append(badge);
    item.append(link);
  } else {
    item.append(badge);
  }
  if (run.message) item.append(" ", element("span", "muted small", run.message));
  return item;
}

function show(row, request) {
  const status = row.querySelector("[data-part=status]");
  status.className = `badge ${REQUEST_BADGE[request.status] || "planned"}`;
  status.textContent = request.status;
  row.querySelector("[data-part=error]").textContent = request.error || "";
  row.querySelector("[data-part=runs]").replaceChildren(...request.runs.map(runItem));
  row.classList.toggle("bad", request.status === "failed");
  if (request.finished) row.removeAttribute("data-following");
}

async function follow() {
  const rows = [...document.querySelectorAll("tr[data-following]")];
  await Promise.all(
    rows.map(async (row) => {
      try {
        const answer = await fetch(`/ui/status/dreams/${row.dataset.dream}`, {
          headers: { Accept: "application/json" },
        });
        if (answer.ok) show(row, await answer.json());
      } catch {
        // The server is away for a moment (a restart): the next round asks again.
      }
    }),
  );
  if (document.querySelector("tr[data-following]")) setTimeout(follow, EVERY_MS);
}

if (document.querySelector("tr[data-following]")) setTimeout(follow, EVERY_MS);
