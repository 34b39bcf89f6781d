// crashy runs a real MCP server (argv[2], the reference "everything"
// server's entry point) on stdio behind a pipe, and kills it with SIGKILL
// half a second into any call of its trigger-long-running-operation tool:
// an MCP server that crashes in the middle of a call. Each start appends
// this process's pid to argv[3].
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import readline from "node:readline";

const [entry, startsFile] = process.argv.slice(2);
appendFileSync(startsFile, `${process.pid}\n`);
const server = spawn(process.execPath, [entry, "stdio"], { stdio: ["pipe", "inherit", "inherit"] });
server.on("exit", (code, signal) => {
  process.stderr.write(`crashy: the server exited (${signal ?? code})\n`);
  process.exit(1);
});
const lines = readline.createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    msg = {};
  }
  if (msg.method === "tools/call" && msg.params?.name === "trigger-long-running-operation") {
    setTimeout(() => {
      process.stderr.write("crashy: killing the server in the middle of a call\n");
      server.kill("SIGKILL");
    }, 500);
  }
  server.stdin.write(line + "\n");
});
lines.on("close", () => server.stdin.end());
