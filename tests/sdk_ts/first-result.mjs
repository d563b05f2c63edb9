// An unmodified TypeScript SDK app that reads until its first result, as
// claude-code-action did: it prints that result's text and stops reading.
// argv: the CLI to run (pathToClaudeCodeExecutable), the working directory.
import { query } from "@anthropic-ai/claude-agent-sdk";

const [cli, cwd] = process.argv.slice(2);
for await (const message of query({
  prompt: "Investigate.",
  options: { pathToClaudeCodeExecutable: cli, cwd, permissionMode: "bypassPermissions", env: process.env },
})) {
  if (message.type === "result") {
    console.log(JSON.stringify({ subtype: message.subtype, result: message.result ?? null }));
    break;
  }
}
