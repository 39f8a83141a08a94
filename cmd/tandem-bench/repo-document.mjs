// One large document with real automerge-repo clients (JS automerge, what
// users run), against Tandem and the stock sync server in one run; the
// stock server keeps documents on disk (NodeFSStorageAdapter) so that it
// can be restarted on them. In order:
//   write       a Repo creates a document and types --changes characters
//               into its text, one change each, letting its Repo sync as
//               it does (at most every 100 ms, everything since); done when
//               the server's reply names the writer's heads;
//   first sync  a fresh Repo's find, until it holds the writer's heads;
//   cold find   the writer shut down, the server stopped and started again
//               on its data, a fresh Repo's find, until the same;
//   REST reads  against Tandem, a backend's GET of it as JSON, after the
//               first sync and again after one more restart (below);
//   paste       a Repo's create({text}) of --paste-bytes, until the server
//               names its heads, then a second Repo's find, until it holds
//               them: from create to the reader holding the whole text.
// Each reports its time, this process's CPU in it (the clients' automerge
// and protocol work) and the server's, and the server's RSS after it.
// Beside them, the floors no server goes under, timed in this process:
// the reader's own automerge receiving the document from a peer that has
// it (stock automerge sends the document saved), for the first sync and
// the cold find, and for the paste the writer's create and the same; and
// for the paste a second floor, two Repos with no server between them
// (connected by a MessageChannel in this process), timed as the paste is:
// from the writer's create until the reader's find holds its heads, the
// work both Repos do whatever the server. The paste's timeline says when
// the writer's create returned and it sent its first sync message, when
// the server named its heads, when the reader's find started, when the
// message that brought the reader the document came, and when the reader
// held its heads.
// The paste's memory is the server's RSS ten seconds after the reader had
// it, over its RSS after ten quiet seconds before the paste, per
// character. Against Tandem it also times a backend's REST read of the
// document (GET /api/docs/{id}, until the body is received and parsed as
// JSON, the work a backend without automerge does), with the clients'
// and the server's CPU in it: just written (after the first sync, the
// document in memory), and cold (the server stopped and started again
// after the cold find, the read its first request for the document).
//
// With --changes 0 only the paste runs; --settle is the seconds waited
// before and after it for the RSS readings (10).
//
//   node cmd/tandem-bench/repo-document.mjs [--changes 100000]
//     [--paste-bytes 1048576] [--settle 10] [--tandem-bin bin/tandem]
//     [--stock-dir cmd/tandem-bench/stock] [--only tandem|stock]
//     [--tandem-flags=...]
import { parseArgs } from "node:util"
import { MessageChannel } from "node:worker_threads"
import { Repo, NetworkAdapter } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import * as A from "@automerge/automerge"
import { serverOptions, cpuSeconds, rssMiB, clientCPU, startServer, eachServer } from "./repo-harness.mjs"

const { values: opt } = parseArgs({
  options: {
    changes: { type: "string", default: "100000" },
    "paste-bytes": { type: "string", default: String(1 << 20) },
    settle: { type: "string", default: "10" },
    ...serverOptions,
  },
})
const changes = Number(opt.changes), pasteBytes = Number(opt["paste-bytes"]), settleMs = Number(opt.settle) * 1000
const typed = "The quick brown fox jumps over the lazy dog, then types on. "

const sameHeads = (a, b) => a.length === b.length && [...a].sort().every((h, i) => h === [...b].sort()[i])
const until = async cond => { while (!cond()) await new Promise(r => setTimeout(r, 2)) }

// headsOf reads the heads at the start of a sync message (type byte, LEB128
// count, 32-byte hashes) as hex, without decoding the rest: a whole
// decode would cost this process a JS object per change carried.
function headsOf(data) {
  let n = 0, shift = 0, i = 1
  for (let b = 0x80; b & 0x80; shift += 7) { b = data[i++]; n |= (b & 0x7f) << shift }
  const heads = []
  for (let k = 0; k < n; k++, i += 32) heads.push(Buffer.from(data.subarray(i, i + 32)).toString("hex"))
  return heads
}

// client returns a Repo connected to url (or through the network
// adapter given), once it has a peer, with serverHeads(documentId): the
// heads the peer's last sync message for that document named; sentAt and
// lastAt(documentId): when it first sent the peer a sync message of the
// document and when the peer's last one came (performance.now()).
async function client(url, adapter = new WebSocketClientAdapter(url)) {
  const sent = new Map(), last = new Map(), told = new Map()
  const send = adapter.send.bind(adapter)
  adapter.send = m => {
    if (m.type === "sync" && !sent.has(m.documentId)) sent.set(m.documentId, performance.now())
    send(m)
  }
  const repo = new Repo({ network: [adapter] })
  repo.networkSubsystem.on("message", m => {
    if (m.type !== "sync") return
    last.set(m.documentId, performance.now())
    told.set(m.documentId, headsOf(m.data))
  })
  await until(() => repo.peers.length > 0)
  return { repo, serverHeads: id => told.get(id) ?? [], sentAt: id => sent.get(id), lastAt: id => last.get(id) }
}

// ChannelAdapter is a Repo's network adapter over one end of a
// MessageChannel: two Repos in this process that are each other's one
// peer, with no server between them. Each end says who it is as it
// connects; the other takes that as its peer.
class ChannelAdapter extends NetworkAdapter {
  #ready
  constructor(port) {
    super()
    this.port = port
    this.#ready = Promise.resolve()
  }
  isReady() { return true }
  whenReady() { return this.#ready }
  connect(peerId, peerMetadata) {
    this.peerId = peerId
    this.peerMetadata = peerMetadata ?? {}
    this.port.on("message", m => {
      if (m.type === "arrive") this.emit("peer-candidate", { peerId: m.senderId, peerMetadata: m.peerMetadata })
      else if (m.type === "leave") this.emit("peer-disconnected", { peerId: m.senderId })
      else this.emit("message", m)
    })
    this.port.postMessage({ type: "arrive", senderId: peerId, peerMetadata: this.peerMetadata })
  }
  send(m) { this.port.postMessage(m) }
  disconnect() {
    this.port.postMessage({ type: "leave", senderId: this.peerId })
    this.port.close()
  }
}

// twoRepos times the paste between two Repos connected to each other
// directly: the writer (made beforehand, its end of the channel waiting)
// creates the document; a fresh reader, connected then, finds it until
// it holds the writer's heads. It returns the ms and the timeline.
async function twoRepos(text) {
  const { port1, port2 } = new MessageChannel()
  const writer = new Repo({ network: [new ChannelAdapter(port1)] })
  const t0 = performance.now()
  const p = writer.create({ text })
  const created = performance.now()
  const pasted = A.getHeads(p.doc())
  const reader = await client(null, new ChannelAdapter(port2))
  const findAt = performance.now()
  const h = await reader.repo.find(p.url)
  await until(() => sameHeads(A.getHeads(h.doc()), pasted))
  const ms = performance.now() - t0
  const at = t => Math.round(t - t0)
  const timeline = { created: at(created), findAt: at(findAt), reached: at(reader.lastAt(p.documentId)) }
  await reader.repo.shutdown()
  await writer.shutdown()
  return { ms: Math.round(ms), timeline }
}

// ownSync returns the ms a fresh peer's automerge takes to receive doc
// from a peer that has it: the reader's half of a first sync, the
// request and answer made beforehand.
function ownSync(doc) {
  const [ask, request] = A.generateSyncMessage(A.init(), A.initSyncState())
  const [, theirs] = A.receiveSyncMessage(A.clone(doc), A.initSyncState(), request)
  const [, answer] = A.generateSyncMessage(A.clone(doc), theirs)
  return timed(() => A.receiveSyncMessage(A.init(), ask, answer))
}

// howSent says, of a Tandem node, how its new readers were sent large
// documents: its counts of readers sent a stored save while the document
// loaded, and of readers that waited for a save.
async function howSent(server) {
  if (opt.only !== "tandem") return ""
  const text = await (await fetch(server.url.replace(/^ws/, "http").replace(/\/ws$/, "/metrics"))).text()
  const count = name => Number((text.match(new RegExp(`^${name} (\\S+)$`, "m")) ?? [])[1] ?? 0)
  return `readers sent a stored save early ${count("tandem_document_readers_sent_early_total")}, readers that waited for a save ${count("tandem_document_readers_waited_for_save_total")}`
}

// timed runs fn and returns its time in ms.
function timed(fn) {
  const t0 = performance.now()
  fn()
  return Math.round(performance.now() - t0)
}

// phase runs fn and returns its time and the CPU this process and the
// server spent in it.
async function phase(server, fn) {
  const cpu0 = process.cpuUsage(), server0 = cpuSeconds(server.proc.pid), t0 = performance.now()
  await fn()
  return {
    ms: Math.round(performance.now() - t0),
    clientCPU: clientCPU(cpu0),
    serverCPU: cpuSeconds(server.proc.pid) - server0,
    rss: rssMiB(server.proc.pid),
  }
}

// restRead reads the document over REST as a backend does, as JSON,
// until the body is parsed, and checks it is the whole document at heads.
async function restRead(server, documentId, heads) {
  const base = server.url.replace(/^ws/, "http").replace(/\/ws$/, "")
  const res = await fetch(`${base}/api/docs/${documentId}`)
  const body = await res.json()
  if (!res.ok) throw new Error(`REST read: ${res.status} ${JSON.stringify(body)}`)
  if (body.doc.text.length !== changes || !sameHeads(body.heads, heads)) {
    throw new Error(`REST read: ${body.doc.text.length} characters at heads ${body.heads}, not ${changes} at ${heads}`)
  }
}

// findWhole has a fresh Repo find url and waits until it holds heads.
// It returns when (performance.now()) the Repo had the server as its peer
// and began its find, and when the message that brought it the heads came
// (the server's last before the Repo held them).
async function findWhole(url, docUrl, heads) {
  const { repo, lastAt } = await client(url)
  const findAt = performance.now()
  const h = await repo.find(docUrl)
  await until(() => sameHeads(A.getHeads(h.doc()), heads))
  const reached = lastAt(h.documentId)
  await repo.shutdown()
  return { findAt, reached }
}

async function measure(server) {
  const result = { name: opt.only, changes, pasteBytes, rss0: rssMiB(server.proc.pid) }
  if (opt.only === "tandem") {
    // Node loads its fetch on the first call: a backend has long done so.
    await fetch(server.url.replace(/^ws/, "http").replace(/\/ws$/, "/healthz"))
  }
  if (changes > 0) await document(server, result)
  await paste(server, result)
  return result
}

// document writes the typed document and reads it back: the write, the
// first sync, the cold find and the REST reads.
async function document(server, result) {
  const writer = await client(server.url)
  const doc = writer.repo.create({ text: "" })
  result.write = await phase(server, async () => {
    for (let i = 0; i < changes; i++) {
      doc.change(d => A.splice(d, ["text"], i, 0, typed[i % typed.length]))
      if (i % 1000 === 999) await new Promise(r => setImmediate(r)) // let the Repo send
    }
    await until(() => sameHeads(writer.serverHeads(doc.documentId), A.getHeads(doc.doc())))
  })
  const heads = A.getHeads(doc.doc())
  result.firstSync = await phase(server, () => findWhole(server.url, doc.url, heads))
  if (opt.only === "tandem") result.restWarm = await phase(server, () => restRead(server, doc.documentId, heads))
  // The floor a server cannot go under: the reader's own automerge taking
  // in the document as a server that has it at hand sends it (stock
  // automerge's answer to a peer that has nothing: the document saved),
  // in this process.
  result.ownLoadMs = ownSync(doc.doc())
  await writer.repo.shutdown() // else it would bring the document back after the restart
  await server.restart()
  result.rssCold0 = rssMiB(server.proc.pid)
  result.cold = await phase(server, () => findWhole(server.url, doc.url, heads))
  result.coldHow = await howSent(server)
  if (opt.only === "tandem") {
    // A backend's read of it over REST as the first request after a
    // restart: the node loads the document for it.
    await server.restart()
    result.restCold = await phase(server, () => restRead(server, doc.documentId, heads))
  }
}

// paste times a paste through the server, and its floors.
async function paste(server, result) {
  const paster = await client(server.url)
  const text = "lorem ipsum ".repeat(Math.ceil(pasteBytes / 12)).slice(0, pasteBytes)
  // The paste's floor: what the two clients' automerge needs, the
  // writer's create and the reader's load of it saved.
  let made
  result.pasteOwnMs = timed(() => { made = A.from({ text }) }) + ownSync(made)
  // The same with the clients' Repos, and no server.
  const direct = await twoRepos(text)
  result.pasteTwoReposMs = direct.ms
  result.pasteTwoReposTimeline = direct.timeline
  // The RSS the paste is measured over, once the cold find's has settled.
  await new Promise(r => setTimeout(r, settleMs))
  result.rssPaste0 = rssMiB(server.proc.pid)
  let stored, timeline
  result.paste = await phase(server, async () => {
    const t0 = performance.now()
    const p = paster.repo.create({ text })
    const created = performance.now()
    const pasted = A.getHeads(p.doc())
    await until(() => sameHeads(paster.serverHeads(p.documentId), pasted))
    stored = Math.round(performance.now() - t0)
    const found = await findWhole(server.url, p.url, pasted)
    const at = t => Math.round(t - t0)
    timeline = {
      created: at(created), sent: at(paster.sentAt(p.documentId)), stored,
      findAt: at(found.findAt), reached: at(found.reached), held: at(performance.now()),
    }
  })
  result.paste.storedMs = stored
  result.pasteTimeline = timeline
  // What the server holds for the paste once it has settled: ten seconds
  // after the reader had it, per character.
  await new Promise(r => setTimeout(r, settleMs))
  result.pasteRSS10 = rssMiB(server.proc.pid)
  await paster.repo.shutdown()
}

function print(r) {
  const line = (label, p) => console.log(`${label.padEnd(12)} ${(p.ms / 1000).toFixed(2)} s (clients' CPU ${p.clientCPU.toFixed(2)} s, server's ${p.serverCPU.toFixed(2)} s; server RSS after ${p.rss.toFixed(1)} MiB)`)
  console.log(`== ${r.name}: ${r.changes} typed changes, then a paste of ${r.pasteBytes} bytes, stock automerge-repo clients`)
  console.log(`server RSS   ${r.rss0.toFixed(1)} MiB before`)
  if (r.write) {
    line("write", r.write)
    line("first sync", r.firstSync)
    line("cold find", r.cold)
    if (r.coldHow) console.log(`${"".padEnd(12)} ${r.coldHow}`)
    console.log(`${"".padEnd(12)} the reader's own automerge receiving it: ${(r.ownLoadMs / 1000).toFixed(2)} s (first sync ${(r.firstSync.ms / r.ownLoadMs).toFixed(2)}×, cold find ${(r.cold.ms / r.ownLoadMs).toFixed(2)}× that)`)
  }
  if (r.restWarm) line("REST read", r.restWarm)
  if (r.restCold) line("REST cold", r.restCold)
  line("paste", r.paste)
  console.log(`${"".padEnd(12)} the clients' own automerge for it (create, then receive it): ${(r.pasteOwnMs / 1000).toFixed(2)} s (the paste ${(r.paste.ms / r.pasteOwnMs).toFixed(2)}× that)`)
  console.log(`${"".padEnd(12)} two Repos with no server between them: ${(r.pasteTwoReposMs / 1000).toFixed(2)} s (the paste ${(r.paste.ms / r.pasteTwoReposMs).toFixed(2)}× that); created at ${r.pasteTwoReposTimeline.created} ms, the reader's find at ${r.pasteTwoReposTimeline.findAt} ms, the document reached it at ${r.pasteTwoReposTimeline.reached} ms`)
  const t = r.pasteTimeline
  console.log(`${"".padEnd(12)} the paste's timeline (ms): created ${t.created}, sent ${t.sent}, heads named ${t.stored}, the reader's find ${t.findAt}, the document reached it ${t.reached}, it held the heads ${t.held}`)
  console.log(`${"".padEnd(12)} the server named its heads after ${(r.paste.storedMs / 1000).toFixed(2)} s; 10 s after the reader had it, RSS ${r.pasteRSS10.toFixed(1)} MiB: ${((r.pasteRSS10 - r.rssPaste0) * 1048576 / r.pasteBytes).toFixed(1)} bytes per character over the RSS before the paste`)
}

if (await eachServer(opt, (t, s, ratio) => {
  if (changes > 0) {
    ratio("write", t.write.ms, s.write.ms)
    ratio("first sync", t.firstSync.ms, s.firstSync.ms)
    ratio("cold find", t.cold.ms, s.cold.ms)
  }
  ratio("paste", t.paste.ms, s.paste.ms)
  ratio("paste / two Repos", t.paste.ms / t.pasteTwoReposMs, s.paste.ms / s.pasteTwoReposMs)
  if (changes > 0) {
    ratio("REST read / stock first sync", t.restWarm.ms, s.firstSync.ms)
    ratio("  the clients' CPU", t.restWarm.clientCPU, s.firstSync.clientCPU)
    ratio("REST cold / stock cold find", t.restCold.ms, s.cold.ms)
    ratio("  the clients' CPU", t.restCold.clientCPU, s.cold.clientCPU)
  }
  const cpu = r => (r.write?.serverCPU ?? 0) + (r.firstSync?.serverCPU ?? 0) + (r.cold?.serverCPU ?? 0) + r.paste.serverCPU
  ratio("server CPU, all", cpu(t), cpu(s))
})) process.exit(0)

const server = await startServer(opt, { stored: true })
try {
  const r = await measure(server)
  print(r)
  console.log(JSON.stringify(r))
} finally {
  await server.close()
}
process.exit(0)
