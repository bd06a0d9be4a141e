// The typeahead search page: asks /v1/typeahead/<user>?q=... as you type
// (debounced), limited to the sources ticked (none asked for when all are),
// aborts the request a newer keystroke makes stale, and renders only the
// newest answer. All data goes in through textContent, never HTML.
"use strict";

const DEBOUNCE_MS = 80;
const LIMIT = 10;

const userInput = document.getElementById("user");
const queryInput = document.getElementById("q");
const resultList = document.getElementById("results");
const errorBox = document.getElementById("error");
const statusLine = document.getElementById("status");
const sourceBoxes = Array.from(document.querySelectorAll("#sources input[name=source]"));

let timer = null;
let inFlight = null;   // the AbortController of the request under way
let latest = 0;        // the number of the newest request; older answers are dropped
let highlighted = -1;

function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = !message;
}

function clearResults(statusText) {
  resultList.replaceChildren();
  queryInput.setAttribute("aria-expanded", "false");
  queryInput.removeAttribute("aria-activedescendant");
  highlighted = -1;
  statusLine.textContent = statusText || "";
}

function span(className, text) {
  const element = document.createElement("span");
  element.className = className;
  element.textContent = text;
  return element;
}

function render(answer) {
  clearResults(`${answer.results.length} result(s) from ${answer.served_by} in ${answer.took_ms} ms`);
  answer.results.forEach((result, i) => {
    const item = document.createElement("li");
    item.id = `result-${i}`;
    item.setAttribute("role", "option");
    item.setAttribute("aria-selected", "false");
    item.dataset.key = result.key;
    item.dataset.source = result.source;
    item.append(span("name", result.name), span("source", result.source));
    const others = result.sources.filter((source) => source !== result.source);
    if (others.length) item.append(span("also", `also in: ${others.join(", ")}`));
    resultList.append(item);
  });
  queryInput.setAttribute("aria-expanded", answer.results.length ? "true" : "false");
}

async function search() {
  if (inFlight) inFlight.abort();
  const user = userInput.value.trim();
  const query = queryInput.value;
  const mine = ++latest;
  if (!query.trim()) {
    inFlight = null;
    showError("");
    clearResults();
    return;
  }
  if (!user) {
    inFlight = null;
    clearResults();
    showError("Enter a user id first.");
    return;
  }
  const ticked = sourceBoxes.filter((box) => box.checked).map((box) => box.value);
  if (!ticked.length) {
    inFlight = null;
    clearResults();
    showError("Choose at least one source.");
    return;
  }
  const controller = new AbortController();
  inFlight = controller;
  let url = `/v1/typeahead/${encodeURIComponent(user)}?q=${encodeURIComponent(query)}&limit=${LIMIT}`;
  if (ticked.length < sourceBoxes.length) url += `&sources=${encodeURIComponent(ticked.join(","))}`;
  try {
    const response = await fetch(url, { signal: controller.signal, headers: { Accept: "application/json" } });
    const answer = await response.json();
    if (mine !== latest) return;  // a newer request was made meanwhile
    if (!response.ok) {
      clearResults();
      showError(answer && typeof answer.error === "string" ? answer.error : `HTTP ${response.status}`);
      return;
    }
    showError("");
    render(answer);
  } catch (error) {
    if (error.name === "AbortError" || mine !== latest) return;
    clearResults();
    showError(`Search failed: ${error.message}`);
  } finally {
    if (inFlight === controller) inFlight = null;
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(search, DEBOUNCE_MS);
}

function highlight(index) {
  const items = resultList.children;
  if (!items.length) return;
  highlighted = (index + items.length) % items.length;
  Array.from(items).forEach((item, i) => item.setAttribute("aria-selected", i === highlighted ? "true" : "false"));
  queryInput.setAttribute("aria-activedescendant", items[highlighted].id);
  items[highlighted].scrollIntoView({ block: "nearest" });
}

queryInput.addEventListener("input", schedule);
userInput.addEventListener("input", schedule);
sourceBoxes.forEach((box) => box.addEventListener("change", schedule));
queryInput.addEventListener("keydown", (event) => {
  if (event.key === "ArrowDown") {
    event.preventDefault();
    highlight(highlighted + 1);
  } else if (event.key === "ArrowUp") {
    event.preventDefault();
    highlight(highlighted < 0 ? -1 : highlighted - 1);
  }
});
