// What the benchmarks with real automerge-repo clients share: starting
// Tandem or the stock sync server (and restarting it on its data), reading
// a process's CPU and RSS, and running each server in a Node process of
// its own, so that the clients' CPU includes the same warm-up (JIT,
// WebAssembly compilation) for both.
import { spawn } from "node:child_process"
import { readFileSync, readdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createInterface } from "node:readline"
import { freePort } from "../tandem/e2e/server.mjs"

// serverOptions are the command-line options every script takes.
export const serverOptions = {
  "tandem-bin": { type: "string", default: "bin/tandem" },
  "stock-dir": { type: "string", default: "cmd/tandem-bench/stock" },
  only: { type: "string" },
  "tandem-flags": { type: "string", default: "" },
}

// cpuSeconds reads a process's user+system CPU time from /proc, with its
// children's (a node's save workers): those that have ended and those
// that run.
export function cpuSeconds(pid) {
  const own = (p, ended) => {
    const stat = readFileSync(`/proc/${p}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(f[11]) + Number(f[12]) + (ended ? Number(f[13]) + Number(f[14]) : 0)) / 100
  }
  return own(pid, true) + childrenOf(pid).reduce((sum, c) => sum + orZero(() => own(c, false)), 0)
}

// rssMiB reads the resident memory of a process and the children that
// run (a node's save workers) from /proc.
export function rssMiB(pid) {
  const own = p => {
    const m = readFileSync(`/proc/${p}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/)
    return m ? Number(m[1]) / 1024 : NaN
  }
  // A child that has ended but is not yet reaped has no VmRSS: it holds none.
  return own(pid) + childrenOf(pid).reduce((sum, c) => sum + (orZero(() => own(c)) || 0), 0)
}

// savesPending reads a Tandem server's tandem_document_saves_pending
// (saves decided and not done); 0 for the stock server, which has none.
export async function savesPending(server) {
  if (!server.url.endsWith("/ws")) return 0
  const text = await (await fetch(server.url.replace(/^ws:/, "http:").replace(/\/ws$/, "/metrics"))).text()
  const m = text.match(/^tandem_document_saves_pending (\S+)$/m)
  return m ? Number(m[1]) : 0
}

// childrenOf returns the pids of a process's children that run.
function childrenOf(pid) {
  const read = t => { try { return readFileSync(`/proc/${pid}/task/${t}/children`, "utf8") } catch { return "" } }
  return readdirSync(`/proc/${pid}/task`).flatMap(t => read(t).split(" ").filter(Boolean).map(Number))
}

// orZero is f's value, or 0 if it throws (a child that ended meanwhile).
function orZero(f) {
  try { return f() } catch { return 0 }
}

// clientCPU returns this process's CPU seconds since a process.cpuUsage()
// reading.
export function clientCPU(since) {
  const c = process.cpuUsage(since)
  return (c.user + c.system) / 1e6
}

// bringsChanges reads whether a sync message carries changes from its
// header (heads, need, have entries, then the changes' count), in plain
// JS: cheap beside the client's own receive.
export function bringsChanges(b) {
  let off = 1 // the message type
  const uleb = () => {
    let n = 0, shift = 0, x
    do { x = b[off++]; n += (x & 0x7f) * 2 ** shift; shift += 7 } while (x & 0x80)
    return n
  }
  const skip = n => { off += n } // after uleb() has moved off past the count
  skip(32 * uleb()) // heads
  skip(32 * uleb()) // need
  for (let haves = uleb(); haves > 0; haves--) {
    skip(32 * uleb()) // last sync
    skip(uleb()) // bloom
  }
  return off < b.length && uleb() > 0
}

export const pct = (xs, p) => xs.length ? xs[Math.min(xs.length - 1, Math.floor(xs.length * p / 100))] : NaN

// run runs argv and resolves with the process once a line of its output
// contains ready.
async function run(argv, ready) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] })
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${argv[0]} did not start`)), 30000)
    for (const s of [proc.stdout, proc.stderr]) {
      createInterface({ input: s }).on("line", l => { if (l.includes(ready)) { clearTimeout(timer); resolve() } })
    }
    proc.on("exit", code => reject(new Error(`${argv[0]} exited (${code})`)))
  })
  return proc
}

// startServer starts the server named by opt.only on a free port with a
// data directory of its own (the stock server stores documents only when
// stored is set). It returns the server's URL, its process, restart (stop
// it and start it again on the same port and data) and close.
export async function startServer(opt, { stored = false } = {}) {
  const name = opt.only
  const port = await freePort()
  const dataDir = mkdtempSync(join(tmpdir(), "repo-bench-"))
  const argv = name === "tandem"
    ? [opt["tandem-bin"], "--addr", `127.0.0.1:${port}`, "--data-dir", dataDir,
        "--max-conns-per-ip", "100000", "--message-rate", "1000", "--message-burst", "2000",
        ...opt["tandem-flags"].split(" ").filter(Boolean)]
    : ["node", join(opt["stock-dir"], "server.mjs"), String(port), ...(stored ? [dataDir] : [])]
  const ready = name === "tandem" ? "tandem serving" : "listening"
  const stop = async proc => {
    const exited = new Promise(r => proc.once("exit", r))
    proc.kill("SIGINT") // both write what is unwritten before they exit
    await exited
  }
  const s = {
    url: name === "tandem" ? `ws://127.0.0.1:${port}/ws` : `ws://127.0.0.1:${port}`,
    proc: await run(argv, ready),
    async restart() {
      await stop(s.proc)
      s.proc = await run(argv, ready)
    },
    async close() {
      await stop(s.proc)
      rmSync(dataDir, { recursive: true, force: true })
    },
  }
  return s
}

// eachServer, in the parent process (no --only), runs this script once per
// server with --only, prints each child's report, and gives report the
// results the children printed as their last JSON line; it reports
// whether it did (a child with --only measures, and prints its result).
export async function eachServer(opt, report) {
  if (opt.only) return false
  const results = []
  for (const name of ["tandem", "stock"]) {
    const args = process.argv.slice(2).filter(a => !a.startsWith("--only"))
    const child = spawn(process.execPath, [process.argv[1], ...args, `--only=${name}`], { stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    child.stdout.on("data", d => { out += d })
    await new Promise(r => child.on("exit", r))
    process.stdout.write(out.split("\n").filter(l => !l.startsWith("{")).join("\n"))
    const line = out.split("\n").find(l => l.startsWith("{"))
    if (!line) throw new Error(`${name}: no result`)
    results.push(JSON.parse(line))
  }
  console.log("== tandem / stock")
  const ratio = (a, b) => (a / Math.max(b, 1e-9)).toFixed(2)
  report(results[0], results[1], (label, a, b) => console.log(`${label.padEnd(20)} ${ratio(a, b)}× (lower is better)`))
  return true
}
