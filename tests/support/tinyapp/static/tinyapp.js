"use strict";
PL.panels.push({
  path: "/api/tinyapp",
  render(panel) {
    document.getElementById("tinyapp-queue").textContent =
      `${panel.queue}: ${panel.exists ? "created" : "not created yet"}`;
  },
  failed(reason) {
    document.getElementById("tinyapp-queue").textContent = reason;
  },
});
