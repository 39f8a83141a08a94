// Typing with real automerge-repo clients: T typists at C characters a
// second and R readers, each a stock Repo with the WebSocket client
// adapter, all in this Node process, against Tandem and the stock sync
// server in one run. It measures what tandem-bench's Go clients cannot
// vouch for: a generic client implementation, with its own sync loop and
// throttling. Reported per server: keystroke-to-reader latency, the
// frames and bytes the clients received, this process's CPU (all the
// clients), and the server's CPU.
//
//   node cmd/tandem-bench/repo-typing.mjs [--typists 4] [--readers 20]
//     [--rate 5] [--duration 10] [--tandem-bin bin/tandem]
//     [--stock-dir cmd/tandem-bench/stock] [--only tandem|stock]
//     [--tandem-flags=--presence-window=0]
import { spawn } from "node:child_process"
import { readFileSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createInterface } from "node:readline"
import { parseArgs } from "node:util"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import * as A from "@automerge/automerge"
import { freePort } from "../tandem/e2e/server.mjs"

const { values: opt } = parseArgs({
  options: {
    typists: { type: "string", default: "4" },
    readers: { type: "string", default: "20" },
    rate: { type: "string", default: "5" },
    duration: { type: "string", default: "10" },
    "tandem-bin": { type: "string", default: "bin/tandem" },
    "stock-dir": { type: "string", default: "cmd/tandem-bench/stock" },
    only: { type: "string" },
    "tandem-flags": { type: "string", default: "" },
  },
})
const typists = Number(opt.typists), readers = Number(opt.readers)
const rate = Number(opt.rate), duration = Number(opt.duration) * 1000

// cpuSeconds reads a process's user+system CPU time from /proc.
function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(f[11]) + Number(f[12])) / 100
}

// startServer runs argv and resolves with the process once a line of its
// output contains ready.
async function startServer(argv, ready) {
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

const pct = (xs, p) => xs.length ? xs[Math.min(xs.length - 1, Math.floor(xs.length * p / 100))] : NaN

async function run(name, url, serverPid) {
  const repos = []
  let frames = 0, bytes = 0
  for (let i = 0; i < typists + readers; i++) {
    const repo = new Repo({ network: [new WebSocketClientAdapter(url)] })
    repo.networkSubsystem.on("message", m => { frames++; bytes += m.data?.byteLength ?? 0 })
    repos.push(repo)
  }
  const until = async cond => { while (!cond()) await new Promise(r => setTimeout(r, 10)) }
  await until(() => repos.every(r => r.peers.length > 0))
  const first = repos[0].create({ text: "", stamps: {} })
  const handles = [first]
  for (const r of repos.slice(1)) handles.push(await r.find(first.url))

  const latencies = []
  handles.slice(typists).forEach(h => {
    const seen = {}
    h.on("change", ({ doc }) => {
      const now = Date.now()
      for (const [k, at] of Object.entries(doc.stamps ?? {})) {
        if (at > (seen[k] ?? 0)) { seen[k] = at; latencies.push(now - at) }
      }
    })
  })
  await new Promise(r => setTimeout(r, 500)) // let the initial sync settle
  const frames0 = frames, bytes0 = bytes
  const cpu0 = process.cpuUsage(), server0 = cpuSeconds(serverPid)
  const started = Date.now()
  const timers = handles.slice(0, typists).map((h, i) => setInterval(() => {
    h.change(d => {
      A.splice(d, ["text"], d.text.length, 0, "x")
      d.stamps[`t${i}`] = Date.now()
    })
  }, 1000 / rate))
  await new Promise(r => setTimeout(r, duration))
  timers.forEach(clearInterval)
  await new Promise(r => setTimeout(r, 2000)) // the last deliveries
  const window = (Date.now() - started) / 1000
  const cpu = process.cpuUsage(cpu0)
  const clientCPU = (cpu.user + cpu.system) / 1e6
  const serverCPU = cpuSeconds(serverPid) - server0
  for (const r of repos) await r.shutdown()
  latencies.sort((a, b) => a - b)
  const result = { name, arrivals: latencies.length, p50: pct(latencies, 50), p99: pct(latencies, 99),
    frames: frames - frames0, bytes: bytes - bytes0, clientCPU, serverCPU, window }
  console.log(`== ${name}: ${typists} typists at ${rate}/s, ${readers} readers, stock automerge-repo clients`)
  console.log(`arrivals at readers  ${result.arrivals}`)
  console.log(`latency p50/p99      ${result.p50} ms / ${result.p99} ms`)
  console.log(`clients received     ${result.frames} frames, ${(result.bytes / 1e6).toFixed(1)} MB`)
  console.log(`clients' CPU         ${clientCPU.toFixed(2)} s (${(100 * clientCPU / window).toFixed(0)}% of a core)`)
  console.log(`server CPU           ${serverCPU.toFixed(2)} s (${(100 * serverCPU / window).toFixed(0)}% of a core)`)
  return result
}

// Each server is measured by a process of its own: the clients' CPU then
// includes the same warm-up (JIT, WebAssembly compilation) for both.
if (!opt.only) {
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
  const [t, s] = results
  const r = (a, b) => (a / Math.max(b, 1e-9)).toFixed(2)
  console.log("== tandem / stock")
  console.log(`latency p99          ${r(t.p99, s.p99)}× (lower is better)`)
  console.log(`frames to clients    ${r(t.frames, s.frames)}× (lower is better)`)
  console.log(`bytes to clients     ${r(t.bytes, s.bytes)}× (lower is better)`)
  console.log(`clients' CPU         ${r(t.clientCPU, s.clientCPU)}× (lower is better)`)
  console.log(`server CPU           ${r(t.serverCPU, s.serverCPU)}× (lower is better)`)
  process.exit(0)
}

const name = opt.only
const port = await freePort()
const dataDir = mkdtempSync(join(tmpdir(), "repo-typing-"))
const proc = name === "tandem"
  ? await startServer([opt["tandem-bin"], "--addr", `127.0.0.1:${port}`, "--data-dir", dataDir,
      "--max-conns-per-ip", "100000", "--message-rate", "1000", "--message-burst", "2000",
      ...opt["tandem-flags"].split(" ").filter(Boolean)], "tandem serving")
  : await startServer(["node", join(opt["stock-dir"], "server.mjs"), String(port)], "listening")
try {
  const result = await run(name, name === "tandem" ? `ws://127.0.0.1:${port}/ws` : `ws://127.0.0.1:${port}`, proc.pid)
  console.log(JSON.stringify(result))
} finally {
  proc.kill("SIGTERM")
  rmSync(dataDir, { recursive: true, force: true })
}
process.exit(0)
