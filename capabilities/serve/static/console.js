// The effectagent operator console. No build step, no dependency: it calls the service's own API
// with the bearer token pasted into the page — by paths relative to the page (v1/…), so it works
// wherever the app is mounted. Every value from the service is put into the page
// as text (textContent, text nodes): never as markup.
"use strict";

// ---- the page's pieces, made from data as text --------------------------------------------------

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (name === "text") node.textContent = String(value);
    else if (name === "className") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "-";
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

// ---- Server-Sent Events, parsed from a fetch body (EventSource cannot send a token) -------------

function sseParser(onEvent) {
  let buffer = "";
  return function feed(text) {
    buffer += text.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { id: null, event: "message", data: "" };
      const data = [];
      for (const line of block.split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (name === "id") event.id = value;
        else if (name === "event") event.event = value;
        else if (name === "data") data.push(value);
      }
      if (data.length) {
        event.data = data.join("\n");
        onEvent(event);
      }
    }
  };
}

// ---- one log entry as timeline items --------------------------------------------------------------

function item(kind, who, text, nested) {
  // the space keeps "who" a word of its own in the item's text (copied, or read aloud)
  return el("li", { className: kind + (nested ? " nested" : "") },
    el("span", { className: "who", text: who }), " ", text);
}

// The default summary of a call already starts with its tool's name: said once, not twice.
function summaryText(tool, summary) {
  const text = String(summary === undefined || summary === null ? "" : summary);
  return text.startsWith(tool + ": ") ? text.slice(tool.length + 2) : text;
}

// A tool call's arguments are recorded as the JSON text the model sent: shown as JSON, laid out.
function argumentsText(argumentsValue) {
  if (typeof argumentsValue !== "string") return json(argumentsValue);
  try { return json(JSON.parse(argumentsValue)); } catch (ignored) { return argumentsValue; }
}

function outcomeText(outcome) {
  if (!outcome || typeof outcome !== "object") return "";
  const kind = outcome.kind || "settled";
  if (kind === "success") {
    const result = outcome.result;
    return "succeeded: " + (typeof result === "string" ? result : json(result));
  }
  const said = outcome.message || outcome.reason || outcome.error || "";
  return kind + (said ? ": " + (typeof said === "string" ? said : json(said)) : "");
}

function renderEntry(data) {
  const record = data.record || {};
  const items = [];
  switch (data.kind) {
    case "ConversationCreated":
      items.push(item("meta", "conversation", "started with agent " + record.agent));
      break;
    case "UserInputRecorded":
      items.push(item("user", record.kind === "user" ? record.author || "user" : record.kind,
        record.text || ""));
      break;
    case "ContextAdded":
      items.push(item("meta", "context", (record.item || {}).kind + " " + (record.item || {}).source));
      break;
    case "ModelResponseRecorded":
      for (const [part, value] of record.content || []) {
        if (part === "text") items.push(item("assistant", "assistant", value));
        else if (part === "reasoning") items.push(item("meta", "reasoning", value));
        else if (part === "tool-call") {
          items.push(item("tool", "calls " + value.name, argumentsText(value.arguments), true));
        }
      }
      break;
    case "ToolCallPrepared":
      break; // its call is shown with the response; its outcome with ToolCallSettled
    case "ToolCallSettled": {
      const outcome = record.outcome || {};
      const kind = outcome.kind === "success" ? "tool" : outcome.kind === "unknown" ? "unknown" : "failed";
      items.push(item(kind, record.tool_name, outcomeText(outcome), true));
      const child = (record.audit || {}).subagent;
      if (child && typeof child === "object") {
        const line = item("tool", "subagent " + child.agent,
          child.status + " in conversation " + child.conversation_id +
          " (" + child.turns + " turns, " + child.tool_calls + " tool calls)", true);
        line.classList.add("subagent");
        line.dataset.conversation = String(child.conversation_id || "");
        items.push(line);
      }
      break;
    }
    case "ToolApprovalRequested": {
      const request = record.request || {};
      const said = request.tool_name + ": " + summaryText(request.tool_name, request.summary);
      items.push(item("approval", "approval asked", said + "\n" + json(request.input_preview), true));
      break;
    }
    case "ToolApprovalDecided": {
      const decision = record.decision || {};
      items.push(item("approval", decision.approved ? "approved" : "denied",
        "by " + decision.decided_by + (decision.reason ? ": " + decision.reason : ""), true));
      break;
    }
    case "CompactionCreated":
      items.push(item("meta", "compaction", record.kind + " through entry " + record.covers_through));
      break;
    case "RunCompletedRecord":
      items.push(item("assistant", "completed",
        typeof record.output === "string" ? record.output : json(record.output)));
      break;
    case "RunFailedRecord":
      items.push(item("failed", "failed", record.reason + (record.error ? " (" + record.error.tag + ")" : "")));
      break;
    case "ModelUsageRecorded": {
      const usage = record.usage || {};
      items.push(item("meta", record.purpose === "compaction" ? "summary call" : "check call",
        (usage.input_tokens || 0) + " tokens in, " + (usage.output_tokens || 0) + " out" +
        (record.model ? " (" + record.model + ")" : "")));
      break;
    }
    case "AgentStateWritten":
      items.push(item("meta", "state", record.slot + "/" + record.key + " revision " + record.revision));
      break;
    default:
      items.push(item("meta", data.kind, json(record)));
  }
  return items;
}

// ---- a followed timeline: its entries, and the text of a response while it is streamed -----------

// Live text (events "delta" and "discard", without an id) goes to a "streaming…" line of its run,
// which the recorded response replaces when it arrives (it holds the whole text); a run's end
// takes away what a response never recorded. `decorate` is given each entry's lines.
const ENDS_STREAMING = ["ModelResponseRecorded", "RunCompletedRecord", "RunFailedRecord"];

function timeline(list, decorate) {
  const streaming = new Map();  // run ID → its "streaming…" line and the text in it
  function live(runId) {
    let found = streaming.get(runId);
    if (!found) {
      const text = el("span", { className: "live" });
      found = { line: el("li", { className: "assistant streaming" },
        el("span", { className: "who", text: "streaming…" }), " ", text), text };
      streaming.set(runId, found);
      list.append(found.line);
    }
    return found;
  }
  return function onEvent(event) {
    const data = JSON.parse(event.data);
    const runId = String((event.event === "delta" || event.event === "discard" ?
      data : data.record || {}).run_id || "");
    if (event.event === "delta") {
      const found = live(runId);
      found.text.textContent = found.text.textContent + String(data.text || "");
      return;
    }
    const found = streaming.get(runId);
    if (event.event === "discard") {
      if (found) { streaming.delete(runId); found.line.remove(); }
      return;
    }
    const lines = renderEntry(data).map((line) => decorate(line) || line);
    if (found && ENDS_STREAMING.includes(data.kind)) {
      streaming.delete(runId);
      found.line.replaceWith(...lines);
    } else {
      list.append(...lines);
    }
  };
}

// ---- the browser side: only when there is a page --------------------------------------------------

if (typeof module !== "undefined") {
  module.exports = { el, renderEntry, sseParser, timeline };
} else {
  boot();
}

function boot() {
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem("effectagent-token") || "";
  let follow = null;  // the timeline stream going: its AbortController

  function say(text) { $("error").textContent = text || ""; }

  async function api(path, options) {
    const init = { method: "GET", credentials: "omit", cache: "no-store", headers: {} };
    Object.assign(init, options || {});
    init.headers = Object.assign({ Authorization: "Bearer " + token }, init.headers || {});
    if (init.body !== undefined && typeof init.body !== "string") {
      init.body = JSON.stringify(init.body);
      init.headers["Content-Type"] = "application/json";
    }
    const answer = await fetch(path, init);
    if (!answer.ok) {
      let detail = answer.status + " " + answer.statusText;
      try { detail = (await answer.json()).detail || detail; } catch (ignored) { /* not JSON */ }
      throw new Error(detail);
    }
    return answer;
  }

  async function getJson(path) { return (await api(path)).json(); }

  function fill(list, rows, render, empty) {
    list.replaceChildren(...(rows.length ? rows.map(render) : [el("li", { className: "meta", text: empty })]));
  }

  async function run(what) {
    try { say(""); await what(); } catch (error) { say(String(error.message || error)); }
  }

  // -- who
  async function signIn() {
    const me = await getJson("v1/me");
    $("who").textContent = "Signed in as " + me.principal + (me.operator ? " (operator)" : "") + ".";
    await refreshApprovals();
  }

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    if ($("remember").checked) sessionStorage.setItem("effectagent-token", token);
    else sessionStorage.removeItem("effectagent-token");
    run(signIn);
  });
  $("forget").addEventListener("click", () => {
    token = "";
    sessionStorage.removeItem("effectagent-token");
    $("who").textContent = "Not signed in.";
  });

  // -- tabs
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => show(button.dataset.tab));
  }
  function show(tab) {
    for (const button of document.querySelectorAll("#tabs button")) {
      button.classList.toggle("active", button.dataset.tab === tab);
    }
    for (const section of document.querySelectorAll("main > section")) {
      section.classList.toggle("active", section.id === tab);
    }
    const refresh = { approvals: refreshApprovals, problems: refreshProblems, dead: refreshDead,
      sessions: refreshSessions }[tab];
    if (refresh && token) run(refresh);
  }

  // -- approvals: the list refreshes itself while it is on screen (a call that starts waiting
  // appears without a click). A card already shown is kept as it is, so a refresh never takes a
  // reason from under a person's fingers; only cards that came or went change the list.
  const APPROVALS_EVERY_MS = 3000;
  const cards = new Map();  // "submission/tool call" → its card
  const noApprovals = el("li", { className: "meta", text: "No call waits for a decision." });

  async function refreshApprovals() {
    const found = await getJson("v1/approvals");
    const list = $("approvals-list");
    const kept = new Map();
    const rows = found.approvals.map((approval) => {
      const key = approval.submission_id + "/" + approval.tool_call_id;
      const card = cards.get(key) || approvalCard(approval);
      kept.set(key, card);
      return card;
    });
    cards.clear();
    for (const [key, card] of kept) cards.set(key, card);
    const wanted = rows.length ? rows : [noApprovals];
    const shown = Array.from(list.children);
    if (wanted.length === shown.length && wanted.every((card, i) => shown[i] === card)) return;
    list.replaceChildren(...wanted);
  }

  function approvalCard(approval) {
    const reason = el("input", { placeholder: "reason (recorded)", "aria-label": "reason" });
    const decide = (approved) => run(async () => {
      await api(`v1/submissions/${encodeURIComponent(approval.submission_id)}/decisions`, {
        method: "POST",
        body: { tool_call_id: approval.tool_call_id, approved, reason: reason.value },
      });
      await refreshApprovals();
      openTimeline(approval.conversation_id);
    });
    return el("li", { className: "approval" },
      el("div", {}, el("strong", { text: approval.tool_name }), " — ",
        summaryText(approval.tool_name, approval.summary)),
      el("div", { className: "meta", text: "risk " + approval.risk + " · conversation " +
        approval.conversation_id + " · call " + approval.tool_call_id + " · expires " +
        when(approval.expires_at) }),
      el("pre", { text: json(approval.input_preview) }),
      el("div", { className: "bar" }, reason,
        el("button", { className: "primary approve", type: "button", text: "Approve",
          onclick: () => decide(true) }),
        el("button", { className: "danger deny", type: "button", text: "Deny",
          onclick: () => decide(false) }),
        el("button", { type: "button", text: "Timeline",
          onclick: () => openTimeline(approval.conversation_id) })));
  }

  async function watchApprovals() {
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, APPROVALS_EVERY_MS));
      const onScreen = $("approvals").classList.contains("active") &&
        document.visibilityState === "visible";
      if (!token || !onScreen) continue;
      // an error is shown; a success does not wipe one said before (a decision's, say)
      try { await refreshApprovals(); } catch (error) { say(String(error.message || error)); }
    }
  }
  $("approvals-refresh").addEventListener("click", () => run(refreshApprovals));

  // -- the timeline
  function openTimeline(conversation) {
    $("conversation").value = conversation;
    show("timeline");
    startFollowing(conversation);
  }

  function startFollowing(conversation) {
    if (follow) follow.abort();
    const controller = new AbortController();
    follow = controller;
    const list = $("timeline-list");
    list.replaceChildren();
    let last = null;
    const state = $("timeline-state");
    const onEvent = timeline(list, (line) => {
      if (line.dataset.conversation) {
        line.append(" ", el("button", { type: "button", text: "open",
          onclick: () => openTimeline(line.dataset.conversation) }));
      }
      return line;
    });
    const feed = sseParser((event) => {
      if (event.id !== null) last = event.id;  // live text has none: it is not in the log
      onEvent(event);
    });
    async function connect() {
      while (!controller.signal.aborted) {
        try {
          const headers = last === null ? {} : { "Last-Event-ID": last };
          const path = `v1/conversations/${encodeURIComponent(conversation)}/events`;
          const answer = await api(path, { headers, signal: controller.signal });
          state.textContent = "Following " + conversation + " live.";
          const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            feed(value);
          }
        } catch (error) {
          if (controller.signal.aborted) return;
          state.textContent = "Disconnected (" + (error.message || error) + "); reconnecting…";
        }
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
    connect();
  }

  $("follow").addEventListener("submit", (event) => {
    event.preventDefault();
    const conversation = $("conversation").value.trim();
    if (conversation) startFollowing(conversation);
  });

  $("submit-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const conversation = $("conversation").value.trim();
    const text = $("submit-text").value;
    const kind = $("submit-kind").value;
    if (!conversation || !text.trim()) return;
    run(async () => {
      const key = { "Idempotency-Key": "console-" + crypto.randomUUID() };
      const id = encodeURIComponent(conversation);
      if (kind === "submission") {
        await api(`v1/conversations/${id}/submissions`,
          { method: "POST", headers: key, body: { text } });
      } else {
        await api(`v1/conversations/${id}/steering`,
          { method: "POST", headers: key, body: { text, kind } });
      }
      $("submit-text").value = "";
      if (!follow) startFollowing(conversation);
    });
  });

  // -- Unknown calls and overdue settlements
  async function refreshProblems() {
    const unknown = await getJson("v1/unknown");
    fill($("unknown-list"), unknown.calls, (call) => el("li", {},
      el("strong", { text: call.tool_name }), " may or may not have run — check before repeating it",
      el("div", { className: "meta", text: "call " + call.tool_call_id + " · submission " +
        call.submission_id + " · " + when(call.at) }),
      el("button", { type: "button", text: "Timeline", onclick: () => openTimeline(call.conversation_id) })),
    "No call's outcome is unknown.");
    const seconds = Math.min(86400, Math.max(1, Math.floor(Number($("older-than").value)) || 3600));
    const overdue = await getJson(`v1/overdue?older_than=${seconds}`);
    fill($("overdue-list"), overdue.submissions, submissionCard,
      "No settlement is overdue.");
  }
  $("problems-refresh").addEventListener("click", () => run(refreshProblems));

  function submissionCard(submission, extra) {
    return el("li", {},
      el("strong", { text: submission.submission_id }), " ", submission.status,
      el("div", { className: "meta", text: "conversation " + submission.conversation_id + " · " +
        submission.principal + " · " + submission.attempts + " attempts · admitted " +
        when(submission.admitted_at) }),
      submission.diagnostic ? el("div", { className: "meta",
        text: submission.diagnostic.tag + ": " + submission.diagnostic.message }) : null,
      el("div", { className: "bar" },
        el("button", { type: "button", text: "Timeline",
          onclick: () => openTimeline(submission.conversation_id) }),
        extra instanceof Node ? extra : null));
  }

  // -- dead letters
  async function refreshDead() {
    const dead = await getJson("v1/dead");
    fill($("dead-list"), dead.submissions, (submission) => submissionCard(submission,
      el("button", { className: "primary", type: "button", text: "Retry",
        onclick: () => run(async () => {
          await api(`v1/submissions/${encodeURIComponent(submission.submission_id)}/retry`,
            { method: "POST" });
          await refreshDead();
        }) })), "No submission is dead-lettered.");
  }
  $("dead-refresh").addEventListener("click", () => run(refreshDead));

  // -- sessions and search
  async function refreshSessions() {
    const found = await getJson("v1/conversations");
    fill($("sessions-list"), found.conversations, (conversation) => el("li", {},
      el("strong", { text: conversation.conversation_id }),
      el("div", { className: "meta", text: conversation.principal + " · " +
        conversation.submissions + " submissions · last " + conversation.last_status + " · " +
        when(conversation.last_admitted_at) }),
      el("button", { type: "button", text: "Timeline",
        onclick: () => openTimeline(conversation.conversation_id) })),
    "No conversation yet.");
  }
  $("sessions-refresh").addEventListener("click", () => run(refreshSessions));
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    const words = $("search-words").value.trim();
    if (!words) return;
    run(async () => {
      const found = await getJson(`v1/search?q=${encodeURIComponent(words)}`);
      fill($("sessions-list"), found.hits, (hit) => el("li", {},
        el("div", { text: hit.text }),
        el("div", { className: "meta", text: hit.who + " · " + hit.conversation_id + " · entry " +
          hit.seq + " · " + when(hit.at) }),
        el("button", { type: "button", text: "Timeline", onclick: () => openTimeline(hit.conversation_id) })),
      "Nothing found.");
    });
  });

  if (token) run(signIn);
  watchApprovals();
}
