// An independent inbox writer, following Claude Code's writer protocol with proper-lockfile:
// create the inbox with "wx" as [], lock it (about 10 retries, 5..100 ms apart), re-read (a
// blank file as []), append, write <inbox>.tmp.<hex>, rename over the inbox, unlock. A writer
// whose lock attempts run out drops the message, as Claude Code does; here it reports that
// on stdout and in its exit code so the test can tell.
//
// usage: node inbox-writer.js <inbox> <writer-name> <count> [batch] [text-bytes] [pause-ms]
// pause-ms: mean random pause between appends (a teammate works between two messages)
// stdout: one JSON line at the end: {"writer", "written", "gave_up", "dropped", "errors"}
// (dropped: the bodies of the messages given up on)
"use strict";

const crypto = require("crypto");
const fs = require("fs");
const lockfile = require("proper-lockfile");

const LOCK_OPTIONS = {
  stale: 10000,
  update: 5000,
  realpath: false,
  retries: { retries: 10, minTimeout: 5, maxTimeout: 100 },
};

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function ensureInbox(inbox) {
  try {
    fs.writeFileSync(inbox, "[]", { flag: "wx" });
  } catch (err) {
    if (err.code !== "EEXIST") throw err;
  }
}

// A blank inbox is empty: another writer has created it ("wx") and not yet written [].
// Claude Code's writer reads it through readMailbox, which takes any file JSON.parse
// rejects as empty; this one stays strict past blank, so real corruption is an error.
function parseInbox(text) {
  return text.trim() === "" ? [] : JSON.parse(text);
}

function entry(writer, seq, textBytes) {
  const body = `${writer}#${seq}`;
  const pad = textBytes > body.length ? " " + "x".repeat(textBytes - body.length - 1) : "";
  return {
    from: writer,
    text: body + pad,
    timestamp: new Date().toISOString(),
    type: "message",
    read: false,
    msgV: 1,
    msg_id: crypto.randomUUID(),
  };
}

async function appendBatch(inbox, entries, report) {
  let compromised = null;
  const release = await lockfile.lock(inbox, {
    ...LOCK_OPTIONS,
    onCompromised: (err) => {
      compromised = err;
    },
  });
  try {
    const current = parseInbox(fs.readFileSync(inbox, "utf8"));
    if (!Array.isArray(current)) throw new Error("inbox is not an array");
    current.push(...entries);
    const tmp = `${inbox}.tmp.${crypto.randomBytes(8).toString("hex")}`;
    fs.writeFileSync(tmp, JSON.stringify(current, null, 2));
    fs.renameSync(tmp, inbox);
  } finally {
    await release();
  }
  if (compromised) report.errors.push(`lock compromised: ${compromised.message}`);
}

async function main() {
  const [inbox, writer, countArg, batchArg, bytesArg, pauseArg] = process.argv.slice(2);
  const count = Number(countArg);
  const batch = Number(batchArg || 1);
  const textBytes = Number(bytesArg || 0);
  const pauseMs = Number(pauseArg || 0);
  const report = { writer, written: 0, gave_up: 0, dropped: [], errors: [] };
  for (let seq = 0; seq < count; seq += batch) {
    const entries = [];
    for (let i = seq; i < Math.min(count, seq + batch); i++) entries.push(entry(writer, i, textBytes));
    try {
      ensureInbox(inbox);
      await appendBatch(inbox, entries, report);
      report.written += entries.length;
    } catch (err) {
      if (err.code === "ELOCKED") {
        report.gave_up += entries.length;
        for (const e of entries) report.dropped.push(e.text.split(" ")[0]);
      }
      else report.errors.push(`${err.code || "error"}: ${err.message}`);
    }
    if (pauseMs > 0) await sleep(Math.random() * 2 * pauseMs);
  }
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exitCode = report.gave_up || report.errors.length ? 1 : 0;
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ fatal: String(err) }) + "\n");
  process.exitCode = 2;
});
