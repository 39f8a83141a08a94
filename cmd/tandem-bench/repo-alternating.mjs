// Typing with real automerge-repo clients against several servers at
// once, in alternating phases. Each client is a Node process of its own,
// as each person's browser is: it holds one stock Repo (with the
// WebSocket client adapter) per server, and the servers take turns,
// --phase seconds of typing each then a second for the last deliveries,
// for --phases rounds after one round of warm-up, every other round in
// reverse order. What the busy, shared
// machine does to a run then falls on every server alike, where
// repo-typing.mjs measures one server after the other (its ratio for two
// identical binaries ranges from 0.87 to 1.35 on a 2-core machine shared
// with other work). A process per client keeps one client's frames from
// being taken in the same wake-up as another's: clients in one process
// share an event loop, so a server that sends every peer its message in
// the same instant would cost them less there than it costs people. The
// typists start a share of the keystroke interval apart, as people typing
// independently do; --together starts them in one tick, so that their
// keystrokes reach the server in clusters (as repo-typing.mjs's do).
//
// --servers names the servers, comma-separated: "tandem" or "stock",
// a Tandem with flags of its own as "tandem:--sync-gather=0 --x=y", one
// of another build as "tandem@/tmp/tandem.old". For each, per delivered
// keystroke: the messages bringing changes the readers received (what a
// stock client's CPU follows where typists cluster), the frames the
// clients received and sent, the bytes they received, their CPU (the
// client processes', during that server's phases; in brackets the
// system's share of it and the typists') and the server's; and
// keystroke-to-reader latency. With --profile N, V8's CPU profiler
// samples each client process during each server's counted phases, and
// the N functions where the readers spend most of their own time per
// delivered keystroke are listed per server, then the N whose time
// differs most between the first two servers (a sample's time is the
// wall time since the one before, so time in a system call includes any
// wait for the core; the sampling itself costs the clients CPU and adds
// to the run's latencies).
//
//   node cmd/tandem-bench/repo-alternating.mjs [--servers tandem,stock]
//     [--typists 4] [--readers 20] [--rate 5] [--phase 3] [--phases 8]
//     [--history 0] [--together] [--profile 0] [--tandem-bin bin/tandem]
//     [--stock-storage] [--stock-dir cmd/tandem-bench/stock]
import { parseArgs } from "node:util"
import { fork } from "node:child_process"
import { Session } from "node:inspector/promises"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import * as A from "@automerge/automerge"
import { serverOptions, cpuSeconds, pct, startServer, savesPending, bringsChanges } from "./repo-harness.mjs"

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
    profile: { type: "string", default: "0" },
    "stock-storage": { type: "boolean", default: false },
    client: { type: "string" }, // set in a client process: its index
    ...serverOptions,
  },
})
const typists = Number(opt.typists), readers = Number(opt.readers), rate = Number(opt.rate)
const phase = Number(opt.phase) * 1000, phases = Number(opt.phases), history = Number(opt.history)
const sleep = ms => new Promise(r => setTimeout(r, ms))
const until = async cond => { while (!cond()) await sleep(10) }
const sameHeads = (a, b) => a.length === b.length && [...a].sort().every((h, i) => h === [...b].sort()[i])

if (opt.client !== undefined) await client(Number(opt.client))
else await drive()

// client runs one client process: a Repo per server, doing what the
// driver asks (each request answered with its id) until it disconnects.
async function client(index) {
  const typist = index < typists
  let peers = [] // per server: { repo, handle, counters }
  let timers = [], at0, cpu0, counted = {}, seen = {}, stamps = [], sightings = []
  const profiler = Number(opt.profile) > 0 && !typist ? new Session() : null
  if (profiler) {
    profiler.connect()
    await profiler.post("Profiler.enable")
    await profiler.post("Profiler.setSamplingInterval", { interval: 200 })
  }
  const reply = (id, value) => process.send({ id, value })
  const handlers = {
    // connect opens a Repo on each server's URL.
    async connect(urls) {
      peers = urls.map(url => {
        const p = { frames: 0, sent: 0, bytes: 0, changeMsgs: 0 }
        const adapter = new WebSocketClientAdapter(url)
        const send = adapter.send.bind(adapter)
        adapter.send = m => {
          p.sent++
          return send(m)
        }
        p.repo = new Repo({ network: [adapter] })
        p.repo.networkSubsystem.on("message", m => {
          p.frames++
          p.bytes += m.data?.byteLength ?? 0
          if (!typist && m.type === "sync" && bringsChanges(m.data)) p.changeMsgs++
        })
        return p
      })
      await until(() => peers.every(p => p.repo.peers.length > 0))
    },
    // create makes the document on server s, with its history.
    async create(s) {
      const h = peers[s].handle = peers[s].repo.create({ text: "", stamps: {} })
      for (let i = 0; i < history; i++) {
        h.change(d => A.splice(d, ["text"], i, 0, "x"))
        if (i % 1000 === 999) await new Promise(r => setImmediate(r)) // let the Repo send
      }
      return { url: h.url, heads: A.getHeads(h.doc()) }
    },
    // find opens server s's document and waits until it holds heads. A
    // reader then notes each typist's newest stamp as it sees it.
    async find({ s, url, heads }) {
      const h = peers[s].handle ??= await peers[s].repo.find(url)
      await until(() => sameHeads(A.getHeads(h.doc()), heads))
      if (!typist) {
        seen[s] = {}
        h.on("change", ({ doc }) => {
          const now = Date.now()
          for (const [k, at] of Object.entries(doc.stamps ?? {})) {
            const before = seen[s][k] ?? 0
            if (at <= before) continue
            if (counted[s]) sightings.push([k, before, at, now])
            seen[s][k] = at
          }
        })
      }
    },
    // start begins a phase on server s: a typist types, each keystroke
    // stamped with its time, one later than its last.
    async start({ s, count }) {
      if (profiler && count) await profiler.post("Profiler.start")
      counted = { [s]: count }
      stamps = []
      sightings = []
      const p = peers[s]
      at0 = { frames: p.frames, sent: p.sent, bytes: p.bytes, changeMsgs: p.changeMsgs }
      cpu0 = process.cpuUsage()
      if (!typist) return
      let last = 0
      const type = () => {
        const at = Math.max(Date.now(), last + 1)
        last = at
        stamps.push(at)
        p.handle.change(d => {
          A.splice(d, ["text"], d.text.length, 0, "x")
          d.stamps[`t${index}`] = at
        })
      }
      timers.push(setTimeout(() => {
        type()
        timers.push(setInterval(type, 1000 / rate))
      }, opt.together ? 0 : index * 1000 / rate / typists))
    },
    stop() {
      timers.forEach(clearTimeout)
      timers.forEach(clearInterval)
      timers = []
    },
    // report gives what server s's phase cost this client and saw.
    async report(s) {
      const c = process.cpuUsage(cpu0), p = peers[s]
      const selfTime = profiler && counted[s] ? ownTime((await profiler.post("Profiler.stop")).profile) : {}
      counted = {}
      return {
        selfTime,
        cpu: (c.user + c.system) / 1e6, sys: c.system / 1e6,
        frames: p.frames - at0.frames, sent: p.sent - at0.sent, bytes: p.bytes - at0.bytes, changeMsgs: p.changeMsgs - at0.changeMsgs,
        stamps: typist ? { [`t${index}`]: stamps } : {}, sightings,
      }
    },
    async shutdown() {
      for (const p of peers) await p.repo.shutdown()
    },
  }
  process.on("message", async ({ id, op, arg }) => {
    try {
      reply(id, await handlers[op](arg))
    } catch (e) {
      process.send({ id, error: `client ${index}, ${op}: ${e?.stack ?? e}` })
    }
  })
  process.on("disconnect", () => process.exit(0))
}

// ownTime sums each function's own time in a V8 CPU profile, in seconds,
// keyed by its name and place.
function ownTime(profile) {
  const key = new Map(profile.nodes.map(n => {
    const f = n.callFrame
    const where = f.url ? ` ${f.url.replace(/^.*node_modules\//, "")}:${f.lineNumber + 1}` : ""
    return [n.id, `${f.functionName || "(anonymous)"}${where}`]
  }))
  const own = {}
  profile.samples.forEach((id, i) => {
    const k = key.get(id)
    own[k] = (own[k] ?? 0) + profile.timeDeltas[i] / 1e6
  })
  return own
}

// drive starts the servers and the client processes, sets each server's
// document up, runs the phases and reports.
async function drive() {
  const all = []
  for (const spec of opt.servers.split(",")) {
    const [name, flags = ""] = spec.split(/:(.*)/s)
    const [kind, bin = opt["tandem-bin"]] = name.split("@")
    const server = await startServer({ ...opt, only: kind, "tandem-bin": bin, "tandem-flags": flags }, { stored: opt["stock-storage"] })
    all.push({ spec, server, keystrokes: 0, latencies: [], stampsOf: {}, sightings: [],
      frames: 0, sent: 0, bytes: 0, changeMsgs: 0, clientCPU: 0, clientSys: 0, typistCPU: 0, serverCPU: 0, selfTime: new Map() })
  }
  const clients = []
  let next = 0
  const pending = new Map()
  // ask sends a client a request and resolves with its answer; it
  // rejects if the client fails the request or exits first.
  const ask = (c, op, arg) => new Promise((resolve, reject) => {
    const id = next++
    pending.set(id, { resolve, reject, c })
    c.send({ id, op, arg })
  })
  const args = process.argv.slice(2).filter(a => !a.startsWith("--client"))
  for (let i = 0; i < typists + readers; i++) {
    const c = fork(process.argv[1], [...args, `--client=${i}`])
    c.on("message", ({ id, value, error }) => {
      const p = pending.get(id)
      pending.delete(id)
      if (error) p.reject(new Error(error))
      else p.resolve(value)
    })
    c.on("exit", code => {
      for (const [id, p] of pending) {
        if (p.c !== c) continue
        pending.delete(id)
        p.reject(new Error(`client ${i} exited (${code})`))
      }
    })
    clients.push(c)
  }
  const everyone = (op, arg) => Promise.all(clients.map(c => ask(c, op, arg)))
  const readersThenTypists = async (op, arg) => { // so that a reader sees a phase's first keystroke
    await Promise.all(clients.slice(typists).map(c => ask(c, op, arg)))
    await Promise.all(clients.slice(0, typists).map(c => ask(c, op, arg)))
  }
  try {
    await everyone("connect", all.map(s => s.server.url))
    for (const [s, srv] of all.entries()) {
      const { url, heads } = await ask(clients[0], "create", s)
      await everyone("find", { s, url, heads })
      while (await savesPending(srv.server) > 0) await sleep(200)
    }
    await sleep(1000)
    // Every other round goes in reverse: a phase pays for some of what
    // the one before left (its garbage, collected later), and so each of
    // two servers follows the other as often.
    for (let round = 0; round <= phases; round++) {
      const order = [...all.entries()]
      if (round % 2 === 1) order.reverse()
      for (const [s, srv] of order) {
        const count = round > 0
        const server0 = cpuSeconds(srv.server.proc.pid)
        await readersThenTypists("start", { s, count })
        await sleep(phase)
        await everyone("stop")
        await sleep(1000)
        const reports = await everyone("report", s)
        if (!count) continue
        srv.serverCPU += cpuSeconds(srv.server.proc.pid) - server0
        for (const [i, r] of reports.entries()) {
          for (const k of ["frames", "sent", "bytes", "changeMsgs"]) srv[k] += r[k]
          srv.clientCPU += r.cpu
          if (i < typists) srv.typistCPU += r.cpu
          srv.clientSys += r.sys
          for (const [k, ts] of Object.entries(r.stamps)) {
            srv.keystrokes += ts.length
            ;(srv.stampsOf[k] ??= []).push(...ts)
          }
          srv.sightings.push(...r.sightings)
          for (const [k, t] of Object.entries(r.selfTime)) srv.selfTime.set(k, (srv.selfTime.get(k) ?? 0) + t)
        }
      }
    }
    await everyone("shutdown")
  } finally {
    clients.forEach(c => c.disconnect())
    for (const s of all) await s.server.close()
  }
  // A keystroke's stamp replaces its typist's last one: a reader that
  // sees a stamp has every keystroke of that typist up to it, each with
  // its own wait.
  for (const s of all) {
    for (const [k, before, at, now] of s.sightings) {
      for (const t of s.stampsOf[k] ?? []) if (t > before && t <= at) s.latencies.push(now - t)
    }
  }
  console.log(`${typists} typists at ${rate}/s${opt.together ? " (in one tick)" : ""}, ${readers} readers, a history of ${history}, ${phases} phases of ${opt.phase} s each (+1 s) per server, stock automerge-repo clients, a process each`)
  console.log("server                         keystrokes arrivals  p50 ms  p99 ms  change msgs/reader/ks  frames/ks  sent/ks  bytes/ks  clients µs/ks (system, typists)  server µs/ks")
  for (const s of all) {
    const lat = s.latencies.sort((a, b) => a - b)
    const per = x => x / Math.max(lat.length, 1)
    console.log(`${s.spec.padEnd(30)} ${String(s.keystrokes).padStart(10)} ${String(lat.length).padStart(8)} ${String(pct(lat, 50)).padStart(7)} ${String(pct(lat, 99)).padStart(7)}` +
      ` ${per(s.changeMsgs).toFixed(3).padStart(22)} ${per(s.frames).toFixed(3).padStart(10)} ${per(s.sent).toFixed(3).padStart(8)} ${per(s.bytes).toFixed(0).padStart(9)}` +
      ` ${(1e6 * per(s.clientCPU)).toFixed(0).padStart(14)} ${`(${(1e6 * per(s.clientSys)).toFixed(0)}, ${(1e6 * per(s.typistCPU)).toFixed(0)})`.padStart(17)} ${(1e6 * per(s.serverCPU)).toFixed(0).padStart(13)}`)
  }
  const base = all.find(s => s.spec === "stock")
  if (base) {
    for (const s of all.filter(x => x !== base)) {
      const r = (a, b) => (a / Math.max(b, 1e-9)).toFixed(2)
      const per = (x, y) => x[y] / Math.max(x.latencies.length, 1)
      console.log(`${s.spec} / stock, per delivered keystroke: clients' CPU ${r(per(s, "clientCPU"), per(base, "clientCPU"))}×,` +
        ` messages bringing changes ${r(per(s, "changeMsgs"), per(base, "changeMsgs"))}×, frames ${r(per(s, "frames"), per(base, "frames"))}×`)
    }
  }
  if (Number(opt.profile) > 0) {
    const top = Number(opt.profile)
    const perKs = (s, k) => 1e6 * (s.selfTime.get(k) ?? 0) / Math.max(s.latencies.length, 1)
    for (const s of all) {
      console.log(`== ${s.spec}: the readers' own time per delivered keystroke, by function (µs)`)
      for (const k of [...s.selfTime.keys()].filter(k => k !== "(idle)").sort((a, b) => perKs(s, b) - perKs(s, a)).slice(0, top)) {
        console.log(`${perKs(s, k).toFixed(1).padStart(8)}  ${k}`)
      }
    }
    if (all.length >= 2) {
      const [a, b] = all
      console.log(`== ${a.spec} − ${b.spec}, per delivered keystroke (µs), the largest differences`)
      const d = k => perKs(a, k) - perKs(b, k)
      const keys = [...new Set([...a.selfTime.keys(), ...b.selfTime.keys()])].filter(k => k !== "(idle)")
      for (const k of keys.sort((x, y) => Math.abs(d(y)) - Math.abs(d(x))).slice(0, top)) {
        console.log(`${d(k).toFixed(1).padStart(8)}  (${perKs(a, k).toFixed(1)} against ${perKs(b, k).toFixed(1)})  ${k}`)
      }
    }
  }
  process.exit(0)
}
