// clang-tidy over src/ (not the tests) with the checked-in .clang-tidy, and a cache of each
// file's findings, as ccache is for the compiler: CI on 2 cores pays ~12 min for a cold run.
//
//   node tests/tidy/tidy.mjs BUILD_DIR [JOBS]     (make tidy; .ci/run)
//
// A file's findings are reused when nothing that decides them changed. The key is a SHA-256 of
// clang-tidy's version, .clang-tidy, the file's compile command (the checkout's path taken out)
// and its preprocessed text (`c++ -E -P`, every header it includes), with the file's own NOLINT
// lines (-P drops comments). Cache: $VRAMD_TIDY_CACHE,
// else $XDG_CACHE_HOME/vramd-tidy, else ~/.cache/vramd-tidy; VRAMD_TIDY_CACHE=off turns it off.
// Prints each finding once (a header's come once per file that includes it) and a count per
// check; exits 1 when there is any finding or a file could not be checked, 0 when clean.
import { spawn, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [build, jobsArg] = process.argv.slice(2);
if (!build) {
  console.error("usage: node tests/tidy/tidy.mjs BUILD_DIR [JOBS]");
  process.exit(2);
}
const root = process.cwd();
const jobs = Math.max(1, Number(jobsArg || 2));
const cacheSetting = process.env.VRAMD_TIDY_CACHE;
const cacheDir =
  cacheSetting === "off"
    ? null
    : cacheSetting ||
      path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "vramd-tidy");
if (cacheDir) fs.mkdirSync(cacheDir, { recursive: true });

const built = JSON.parse(fs.readFileSync(path.join(build, "compile_commands.json"), "utf8"));
// A unity build (cmake/unity.cmake) has one entry per batch of sources: each source it includes
// is checked with its batch's command and its own path, from a database of its own.
const unityDir = path.join(path.resolve(build), "unity") + path.sep;
const db = [];
for (const e of built) {
  const unit = path.resolve(e.directory, e.file);
  if (!unit.startsWith(unityDir)) {
    db.push(e);
    continue;
  }
  for (const m of fs.readFileSync(unit, "utf8").matchAll(/^#include "([^"]+)"$/gm)) {
    const file = path.join(root, m[1]);
    const args = argvOf(e).map((a) => (path.resolve(e.directory, a) === unit ? file : a));
    db.push({ directory: e.directory, file, arguments: args });
  }
}
const dbDir = path.join(path.resolve(build), "tidy-db");
fs.mkdirSync(dbDir, { recursive: true });
fs.writeFileSync(path.join(dbDir, "compile_commands.json"), JSON.stringify(db, null, 1));
const byFile = new Map(db.map((e) => [path.resolve(e.directory, e.file), e]));
const files = execFileSync("git", ["ls-files", "src/*.cc"], { encoding: "utf8" })
  .split("\n")
  .filter((f) => f && !f.endsWith("_test.cc"));

const tidyVersion = execFileSync("clang-tidy", ["--version"], { encoding: "utf8" });
const config = fs.readFileSync(path.join(root, ".clang-tidy"), "utf8");

// Runs a command; resolves with its exit code and output (never rejects).
function run(cmd, args, cwd) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", (e) => resolve({ code: 127, out: Buffer.alloc(0), err: String(e) }));
    child.on("close", (code) => resolve({ code, out: Buffer.concat(out), err: Buffer.concat(err).toString() }));
  });
}

// The compile command as argv: CMake writes `command` (shell words, no quotes but \").
function argvOf(entry) {
  if (entry.arguments) return entry.arguments.slice();
  return entry.command.match(/(?:[^\s"\\]|\\.|"(?:[^"\\]|\\.)*")+/g).map((w) => w.replace(/\\"/g, '"'));
}

// The command as the cache key sees it: without the object file, which names the source's
// unity batch (cmake/unity.cmake), so that a batch renamed does not make its files new.
function keyArgv(entry) {
  const argv = argvOf(entry);
  const i = argv.indexOf("-o");
  if (i >= 0) argv.splice(i, 2);
  return argv;
}

// Preprocess: the same command with -E -P and no output file.
async function preprocessed(entry) {
  const argv = argvOf(entry);
  const out = [];
  for (let i = 1; i < argv.length; ++i) {
    if (argv[i] === "-o" || argv[i] === "-MF" || argv[i] === "-MT" || argv[i] === "-MQ") { ++i; continue; }
    if (argv[i] === "-c" || argv[i] === "-MD" || argv[i] === "-MMD") continue;
    out.push(argv[i]);
  }
  out.push("-E", "-P");
  return run(argv[0], out, entry.directory);
}

const relative = (text) => text.split(root + path.sep).join("");
let hits = 0;
let misses = 0;
const failures = [];
const outputs = new Map();

async function check(file) {
  const entry = byFile.get(path.resolve(root, file));
  if (!entry) {
    failures.push(`${file}: not in ${dbDir}/compile_commands.json (configure again)`);
    return;
  }
  let key = null;
  if (cacheDir) {
    const pre = await preprocessed(entry);
    if (pre.code === 0) {
      const hash = createHash("sha256")
        .update(tidyVersion).update("\0").update(config).update("\0")
        // The checkout's path goes from the command, in `root/…` and as `-I<root>` alike: a
        // clean clone elsewhere (CI) finds what this one checked.
        .update(relative(keyArgv(entry).join(" ")).split(path.resolve(build)).join("<build>")
          .split(root).join("<root>"))
        .update("\0").update(relative(pre.out.toString()));
      // -P drops comments, and with them NOLINTs: the file's own count too (a header's NOLINT
      // added or removed is not seen: clear the cache then).
      const own = fs.readFileSync(path.resolve(entry.directory, entry.file), "utf8")
        .split("\n").filter((l) => l.includes("NOLINT"));
      if (own.length) hash.update("\0").update(own.join("\n"));
      key = hash.digest("hex");
      const cached = path.join(cacheDir, key);
      if (fs.existsSync(cached)) {
        ++hits;
        outputs.set(file, fs.readFileSync(cached, "utf8"));
        return;
      }
    }
  }
  ++misses;
  const r = await run("clang-tidy", ["-p", dbDir, "--quiet", file], root);
  const text = relative(r.out.toString());
  // clang-tidy exits non-zero when the file does not compile for it: a failure, never cached.
  if (r.code !== 0 && !/warning: /.test(text)) {
    failures.push(`${file}: clang-tidy exited with ${r.code}: ${r.err.trim().split("\n").slice(-3).join(" / ")}`);
    return;
  }
  outputs.set(file, text);
  if (key) {
    const tmp = path.join(cacheDir, `${key}.${process.pid}.tmp`);
    fs.writeFileSync(tmp, text);
    fs.renameSync(tmp, path.join(cacheDir, key));
  }
}

const t0 = Date.now();
const queue = files.slice();
await Promise.all(
  Array.from({ length: jobs }, async () => {
    while (queue.length) await check(queue.shift());
  }),
);

// Each finding once: "path:line:col: warning: text [check]" and the lines that follow it.
const findings = new Map();
for (const text of outputs.values()) {
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; ++i) {
    const m = lines[i].match(/^(\S+:\d+:\d+): warning: .*\[([a-z0-9.,-]+)\]$/);
    if (!m) continue;
    let block = lines[i];
    for (let j = i + 1; j < lines.length && !/^\S+:\d+:\d+: (warning|error|note)/.test(lines[j]); ++j)
      block += "\n" + lines[j];
    if (!findings.has(lines[i])) findings.set(lines[i], { block, check: m[2] });
  }
}
fs.writeFileSync(path.join(build, "tidy.txt"), [...findings.values()].map((f) => f.block).join("\n"));
const perCheck = new Map();
for (const f of findings.values()) perCheck.set(f.check, (perCheck.get(f.check) || 0) + 1);
for (const f of findings.values()) console.log(f.block);
for (const [check, n] of [...perCheck].sort((a, b) => b[1] - a[1])) console.log(`${String(n).padStart(5)} ${check}`);
for (const f of failures) console.error(`tidy: ${f}`);
const seconds = ((Date.now() - t0) / 1000).toFixed(0);
console.log(
  `tidy: ${files.length} files in ${seconds} s (${hits} from the cache, ${misses} checked), ` +
    `${findings.size} findings${failures.length ? `, ${failures.length} files not checked` : ""}`,
);
process.exit(findings.size || failures.length ? 1 : 0);
