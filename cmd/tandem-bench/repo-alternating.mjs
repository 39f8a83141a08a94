// Typing with real automerge-repo clients against several servers at
// once, in alternating phases: each server gets its typists and readers
// (stock Repos with the WebSocket client adapter, all in this Node
// process), and the servers take turns, --phase seconds of typing each
// then a second for the last deliveries, for --phases rounds after one
// round of warm-up. What the busy, shared machine does to a run then
// falls on every server alike, where repo-typing.mjs measures one server
// after the other (its ratio for two identical binaries ranges from 0.87
// to 1.35 on a 2-core machine shared with other work). The typists start
// a share of the keystroke interval apart, as people typing independently
// do; --together starts them in one tick, so that their keystrokes reach
// the server in clusters (as repo-typing.mjs's do).
//
// --servers names the servers, comma-separated: "tandem" or "stock",
// a Tandem with flags of its own as "tandem:--sync-gather=0 --x=y", one
// of another build as "tandem@/tmp/tandem.old". For each, per delivered
// keystroke: the messages bringing changes the readers received (what a
// stock client's CPU follows where typists cluster), the frames the
// clients received and sent, the bytes they received, their CPU (this
// process, during that server's phases) and the server's; and
// keystroke-to-reader latency.
//
//   node cmd/tandem-bench/repo-alternating.mjs [--servers tandem,stock]
//     [--typists 4] [--readers 20] [--rate 5] [--phase 3] [--phases 8]
//     [--history 0] [--together] [--tandem-bin bin/tandem] [--stock-storage]
//     [--stock-dir cmd/tandem-bench/stock]
import { parseArgs } from "node:util"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import * as A from "@automerge/automerge"
import { serverOptions, cpuSeconds, clientCPU, pct, startServer, savesPending, bringsChanges } from "./repo-harness.mjs"

const { values: opt } = parseArgs({
  options: {
    servers: { type: "string", default: "tandem,stock" },
    typists: { type: "string", default: "4" },
    readers: { type: "string", default: "20" },
    rate: { type: "string", default: "5" },
    phase: { type: "string", default: "3" },
    phases: { type: "string", default: "8" },
    history: { type: "string", default: "0" },
    together: { type: "boolean", default: false },
    "stock-storage": { type: "boolean", default: false },
    ...serverOptions,
  },
})
const typists = Number(opt.typists), readers = Number(opt.readers), rate = Number(opt.rate)
const phase = Number(opt.phase) * 1000, phases = Number(opt.phases), history = Number(opt.history)
const sleep = ms => new Promise(r => setTimeout(r, ms))
const until = async cond => { while (!cond()) await sleep(10) }
const sameHeads = (a, b) => a.length === b.length && [...a].sort().every((h, i) => h === [...b].sort()[i])

// setUp starts one server and its clients, makes the document (with its
// history) and waits until every client holds it and the server is done
// with the setup.
async function setUp(spec) {
  const [name, flags = ""] = spec.split(/:(.*)/s)
  const [kind, bin = opt["tandem-bin"]] = name.split("@")
  const server = await startServer({ ...opt, only: kind, "tandem-bin": bin, "tandem-flags": flags }, { stored: opt["stock-storage"] })
  const s = { spec, server, repos: [], handles: [], frames: 0, readerChanges: 0, latencies: [], stampsOf: {},
    keystrokes: 0, countFrom: Infinity, sent: 0, sentOut: 0, bytes: 0, bytesIn: 0, clientCPU: 0, serverCPU: 0, changeMsgs: 0, framesIn: 0, window: 0 }
  for (let i = 0; i < typists + readers; i++) {
    const adapter = new WebSocketClientAdapter(server.url)
    const send = adapter.send.bind(adapter)
    adapter.send = m => {
      s.sent++
      return send(m)
    }
    const repo = new Repo({ network: [adapter] })
    repo.networkSubsystem.on("message", m => {
      s.frames++
      s.bytes += m.data?.byteLength ?? 0
      if (i >= typists && m.type === "sync" && bringsChanges(m.data)) s.readerChanges++
    })
    s.repos.push(repo)
  }
  await until(() => s.repos.every(r => r.peers.length > 0))
  const first = s.repos[0].create({ text: "", stamps: {} })
  for (let i = 0; i < history; i++) {
    first.change(d => A.splice(d, ["text"], i, 0, "x"))
    if (i % 1000 === 999) await new Promise(r => setImmediate(r)) // let the Repo send
  }
  const heads = A.getHeads(first.doc())
  s.handles.push(first)
  for (const r of s.repos.slice(1)) s.handles.push(await r.find(first.url))
  for (const h of s.handles) await until(() => sameHeads(A.getHeads(h.doc()), heads))
  while (await savesPending({ url: server.url }) > 0) await sleep(200)
  // A keystroke's stamp replaces its typist's last one: a reader counts
  // every keystroke up to the one it sees, each with its own wait (those
  // of the warm-up round, before countFrom, not at all).
  s.handles.slice(typists).forEach(h => {
    const seen = {}
    h.on("change", ({ doc }) => {
      const now = Date.now()
      for (const [k, at] of Object.entries(doc.stamps ?? {})) {
        if (at <= (seen[k] ?? 0)) continue
        for (const t of s.stampsOf[k] ?? []) if (t > (seen[k] ?? 0) && t <= at && t >= s.countFrom) s.latencies.push(now - t)
        seen[k] = at
      }
    })
  })
  return s
}

// typeFor runs one phase on s: typing for the phase, then a second for the
// last deliveries. Counted is false for the warm-up round.
async function typeFor(s, counted) {
  if (counted && s.countFrom === Infinity) s.countFrom = Date.now()
  const frames0 = s.frames, changes0 = s.readerChanges, sent0 = s.sent, bytes0 = s.bytes
  const cpu0 = process.cpuUsage(), server0 = cpuSeconds(s.server.proc.pid), at0 = Date.now()
  let keystrokes = 0
  const timers = []
  const type = (h, i) => {
    keystrokes++
    const at = Math.max(Date.now(), (s.stampsOf[`t${i}`]?.at(-1) ?? 0) + 1)
    ;(s.stampsOf[`t${i}`] ??= []).push(at)
    h.change(d => {
      A.splice(d, ["text"], d.text.length, 0, "x")
      d.stamps[`t${i}`] = at
    })
  }
  // Typists are people apart: each starts a share of the interval after
  // the one before (with --together, all in one tick).
  s.handles.slice(0, typists).forEach((h, i) => {
    timers.push(setTimeout(() => {
      type(h, i)
      timers.push(setInterval(() => type(h, i), 1000 / rate))
    }, opt.together ? 0 : i * 1000 / rate / typists))
  })
  await sleep(phase)
  timers.forEach(clearTimeout)
  timers.forEach(clearInterval)
  await sleep(1000)
  if (!counted) return
  s.keystrokes += keystrokes
  s.framesIn += s.frames - frames0
  s.sentOut += s.sent - sent0
  s.bytesIn += s.bytes - bytes0
  s.changeMsgs += s.readerChanges - changes0
  s.clientCPU += clientCPU(cpu0)
  s.serverCPU += cpuSeconds(s.server.proc.pid) - server0
  s.window += (Date.now() - at0) / 1000
}

const all = []
for (const spec of opt.servers.split(",")) all.push(await setUp(spec))
await sleep(1000)
try {
  for (let round = 0; round <= phases; round++) {
    for (const s of all) await typeFor(s, round > 0)
  }
} finally {
  for (const s of all) {
    for (const r of s.repos) await r.shutdown()
    await s.server.close()
  }
}
console.log(`${typists} typists at ${rate}/s${opt.together ? " (in one tick)" : ""}, ${readers} readers, a history of ${history}, ${phases} phases of ${opt.phase} s each (+1 s) per server, stock automerge-repo clients`)
console.log("server                         keystrokes arrivals  p50 ms  p99 ms  change msgs/reader/ks  frames/ks  sent/ks  bytes/ks  clients µs/ks  server µs/ks")
for (const s of all) {
  const lat = s.latencies.sort((a, b) => a - b)
  const per = x => x / Math.max(lat.length, 1)
  console.log(`${s.spec.padEnd(30)} ${String(s.keystrokes).padStart(10)} ${String(lat.length).padStart(8)} ${String(pct(lat, 50)).padStart(7)} ${String(pct(lat, 99)).padStart(7)}` +
    ` ${per(s.changeMsgs).toFixed(3).padStart(22)} ${per(s.framesIn).toFixed(3).padStart(10)} ${per(s.sentOut).toFixed(3).padStart(8)} ${per(s.bytesIn).toFixed(0).padStart(9)}` +
    ` ${(1e6 * per(s.clientCPU)).toFixed(0).padStart(14)} ${(1e6 * per(s.serverCPU)).toFixed(0).padStart(13)}`)
}
const base = all.find(s => s.spec === "stock")
if (base) {
  for (const s of all.filter(x => x !== base)) {
    const r = (a, b) => (a / Math.max(b, 1e-9)).toFixed(2)
    const per = (x, y) => x[y] / Math.max(x.latencies.length, 1)
    console.log(`${s.spec} / stock, per delivered keystroke: clients' CPU ${r(per(s, "clientCPU"), per(base, "clientCPU"))}×,` +
      ` messages bringing changes ${r(per(s, "changeMsgs"), per(base, "changeMsgs"))}×, frames ${r(per(s, "framesIn"), per(base, "framesIn"))}×`)
  }
}
process.exit(0)
