// Typing with real automerge-repo clients: T typists at C characters a
// second and R readers, each a stock Repo with the WebSocket client
// adapter, all in this Node process, against Tandem and the stock sync
// server in one run. It measures what tandem-bench's Go clients cannot
// vouch for: a generic client implementation, with its own sync loop and
// throttling. Reported per server: keystroke-to-reader latency, the
// frames and bytes the clients received and sent, this process's CPU (all
// the clients), and the server's CPU, and whether the server announced a
// storageId: a client Repo does more for each sync message from one that
// does (Tandem does; the stock server here, without storage, does not).
// With --history N the document holds N typed changes (one character
// each, as repo-document writes them) before the typing starts, every
// client holds them, and the server has gone quiet (its saves done): what
// a keystroke costs into a long history. With --record FILE the sync
// messages each reader received (the setup's and the window's) go to
// FILE.tandem.json and FILE.stock.json, for repo-replay.mjs. With
// --stock-storage the stock server keeps its documents on disk, as
// automerge-repo's sync server does, and so announces a storageId too.
//
//   node cmd/tandem-bench/repo-typing.mjs [--typists 4] [--readers 20]
//     [--rate 5] [--duration 10] [--history 0] [--tandem-bin bin/tandem]
//     [--stock-dir cmd/tandem-bench/stock] [--only tandem|stock]
//     [--record FILE] [--stock-storage]
//     [--tandem-flags=--presence-tick=100ms]
import { parseArgs } from "node:util"
import { writeFileSync } from "node:fs"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import * as A from "@automerge/automerge"
import { serverOptions, cpuSeconds, clientCPU, pct, startServer, eachServer, savesPending, bringsChanges } from "./repo-harness.mjs"

const { values: opt } = parseArgs({
  options: {
    typists: { type: "string", default: "4" },
    readers: { type: "string", default: "20" },
    rate: { type: "string", default: "5" },
    duration: { type: "string", default: "10" },
    history: { type: "string", default: "0" },
    record: { type: "string" },
    "stock-storage": { type: "boolean", default: false },
    ...serverOptions,
  },
})
const typists = Number(opt.typists), readers = Number(opt.readers)
const rate = Number(opt.rate), duration = Number(opt.duration) * 1000
const history = Number(opt.history)
const sameHeads = (a, b) => a.length === b.length && [...a].sort().every((h, i) => h === [...b].sort()[i])

async function run(name, url, serverPid) {
  const repos = []
  let frames = 0, bytes = 0, readerFrames = 0, readerChanges = 0, sentFrames = 0, sentBytes = 0
  let inWindow = false
  const received = Array.from({ length: readers }, () => [])
  for (let i = 0; i < typists + readers; i++) {
    const adapter = new WebSocketClientAdapter(url)
    const send = adapter.send.bind(adapter)
    adapter.send = m => {
      sentFrames++
      sentBytes += m.data?.byteLength ?? 0
      return send(m)
    }
    const repo = new Repo({ network: [adapter] })
    repo.networkSubsystem.on("message", m => {
      frames++
      bytes += m.data?.byteLength ?? 0
      if (i >= typists) {
        readerFrames++
        if (m.type === "sync" && bringsChanges(m.data)) readerChanges++
        if (opt.record && (m.type === "sync" || m.type === "request")) {
          received[i - typists].push({ window: inWindow, type: m.type, data: Buffer.from(m.data).toString("base64") })
        }
      }
    })
    repos.push(repo)
  }
  const until = async cond => { while (!cond()) await new Promise(r => setTimeout(r, 10)) }
  await until(() => repos.every(r => r.peers.length > 0))
  const first = repos[0].create({ text: "", stamps: {} })
  for (let i = 0; i < history; i++) {
    first.change(d => A.splice(d, ["text"], i, 0, "x"))
    if (i % 1000 === 999) await new Promise(r => setImmediate(r)) // let the Repo send
  }
  const heads = A.getHeads(first.doc())
  const handles = [first]
  for (const r of repos.slice(1)) handles.push(await r.find(first.url))
  for (const h of handles) await until(() => sameHeads(A.getHeads(h.doc()), heads))
  // The server done with what the setup made it do: its saves (a
  // document that goes quiet is saved 2 s later), then under 5% of a core
  // for 2 s in a row.
  while (await savesPending({ url }) > 0) await new Promise(r => setTimeout(r, 200))
  for (let cpu = cpuSeconds(serverPid), quiet = 0; quiet < 2; ) {
    await new Promise(r => setTimeout(r, 1000))
    const now = cpuSeconds(serverPid)
    quiet = now - cpu < 0.05 ? quiet + 1 : 0
    cpu = now
  }

  // A keystroke's stamp replaces its typist's last one: a change that
  // brings a reader several keystrokes of a typist shows only the last.
  // So each typist's stamps are kept here too, and a reader counts every
  // keystroke up to the one it sees, each with its own wait.
  const latencies = [], stampsOf = {}
  handles.slice(typists).forEach(h => {
    const seen = {}
    h.on("change", ({ doc }) => {
      const now = Date.now()
      for (const [k, at] of Object.entries(doc.stamps ?? {})) {
        if (at <= (seen[k] ?? 0)) continue
        for (const s of stampsOf[k] ?? []) if (s > (seen[k] ?? 0) && s <= at) latencies.push(now - s)
        seen[k] = at
      }
    })
  })
  await new Promise(r => setTimeout(r, 500)) // let the initial sync settle
  // The server's CPU with every client connected and nobody typing, so
  // that a keystroke's cost is what the typing adds to it.
  const idle0 = cpuSeconds(serverPid), idleAt = Date.now()
  await new Promise(r => setTimeout(r, 3000))
  const idleRate = (cpuSeconds(serverPid) - idle0) / ((Date.now() - idleAt) / 1000)
  const frames0 = frames, bytes0 = bytes, readerFrames0 = readerFrames, readerChanges0 = readerChanges
  const sentFrames0 = sentFrames, sentBytes0 = sentBytes
  const cpu0 = process.cpuUsage(), server0 = cpuSeconds(serverPid)
  const started = Date.now()
  inWindow = true
  let keystrokes = 0
  const timers = handles.slice(0, typists).map((h, i) => setInterval(() => {
    keystrokes++
    // One stamp a keystroke: a typist's are 1000/rate ms apart.
    const at = Math.max(Date.now(), (stampsOf[`t${i}`]?.at(-1) ?? 0) + 1)
    ;(stampsOf[`t${i}`] ??= []).push(at)
    h.change(d => {
      A.splice(d, ["text"], d.text.length, 0, "x")
      d.stamps[`t${i}`] = at
    })
  }, 1000 / rate))
  await new Promise(r => setTimeout(r, duration))
  timers.forEach(clearInterval)
  await new Promise(r => setTimeout(r, 2000)) // the last deliveries
  const window = (Date.now() - started) / 1000
  const clientsCPU = clientCPU(cpu0)
  inWindow = false
  if (opt.record) writeFileSync(`${opt.record}.${name}.json`, JSON.stringify({ readers: received }))
  const serverCPU = cpuSeconds(serverPid) - server0
  const storageId = Object.values(repos[0].peerMetadataByPeerId)[0]?.storageId
  for (const r of repos) await r.shutdown()
  latencies.sort((a, b) => a - b)
  const perKeystroke = (serverCPU - idleRate * window) / keystrokes
  const result = { name, keystrokes, perKeystroke, idleRate, arrivals: latencies.length, p50: pct(latencies, 50), p99: pct(latencies, 99),
    frames: frames - frames0, bytes: bytes - bytes0, sentFrames: sentFrames - sentFrames0, sentBytes: sentBytes - sentBytes0,
    clientCPU: clientsCPU, serverCPU, window }
  console.log(`== ${name}: ${typists} typists at ${rate}/s, ${readers} readers, a history of ${history} typed changes, stock automerge-repo clients`)
  console.log(`arrivals at readers  ${result.arrivals}`)
  console.log(`latency p50/p99      ${result.p50} ms / ${result.p99} ms`)
  console.log(`clients received     ${result.frames} frames, ${(result.bytes / 1e6).toFixed(1)} MB`)
  console.log(`  readers received   ${((readerFrames - readerFrames0) / readers / window).toFixed(1)} frames each a second, ${((readerChanges - readerChanges0) / readers / window).toFixed(1)} bringing changes`)
  console.log(`clients sent         ${result.sentFrames} frames, ${(result.sentBytes / 1e6).toFixed(2)} MB of sync data; the server announced ${storageId ? "a" : "no"} storageId`)
  console.log(`clients' CPU         ${clientsCPU.toFixed(2)} s (${(100 * clientsCPU / window).toFixed(0)}% of a core)`)
  console.log(`a delivered keystroke ${(result.frames / Math.max(result.arrivals, 1)).toFixed(3)} frames, ${(1e6 * clientsCPU / Math.max(result.arrivals, 1)).toFixed(0)} µs of the clients' CPU`)
  console.log(`server CPU           ${serverCPU.toFixed(2)} s (${(100 * serverCPU / window).toFixed(0)}% of a core; idle ${(100 * idleRate).toFixed(1)}%; above idle, ${(1e6 * perKeystroke).toFixed(0)} µs a keystroke of ${keystrokes})`)
  return result
}

if (await eachServer(opt, (t, s, ratio) => {
  ratio("latency p99", t.p99, s.p99)
  ratio("frames to clients", t.frames, s.frames)
  ratio("bytes to clients", t.bytes, s.bytes)
  ratio("frames from clients", t.sentFrames, s.sentFrames)
  ratio("clients' CPU", t.clientCPU, s.clientCPU)
  ratio("frames a delivered keystroke", t.frames / Math.max(t.arrivals, 1), s.frames / Math.max(s.arrivals, 1))
  ratio("clients' CPU a delivered keystroke", t.clientCPU / Math.max(t.arrivals, 1), s.clientCPU / Math.max(s.arrivals, 1))
  ratio("server CPU", t.serverCPU, s.serverCPU)
  ratio("server CPU a keystroke", t.perKeystroke, s.perKeystroke)
})) process.exit(0)

const server = await startServer(opt, { stored: opt["stock-storage"] })
try {
  console.log(JSON.stringify(await run(opt.only, server.url, server.proc.pid)))
} finally {
  await server.close()
}
process.exit(0)
