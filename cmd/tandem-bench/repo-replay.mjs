// Replays what the readers of a repo-typing run received (repo-typing
// --record FILE writes FILE.tandem.json and FILE.stock.json) into fresh
// stock Repos, each through an adapter that plays the server: once as a
// peer that announces a storageId and once as one that does not. It
// reports this process's CPU a message costs a Repo over the messages of
// the typing window, the minimum and the median of the rounds after two
// of warm-up. The messages are the same each round, so two servers'
// messages, or the two announcements, compare without a live run's noise
// (its pacing, the other benchmarks on the machine).
//
//   node cmd/tandem-bench/repo-replay.mjs [--rounds 8] [--readers 20] FILE...
import { parseArgs } from "node:util"
import { readFileSync } from "node:fs"
import { Repo, NetworkAdapter, generateAutomergeUrl } from "@automerge/automerge-repo"

const { values: opt, positionals: files } = parseArgs({
  options: {
    rounds: { type: "string", default: "8" },
    readers: { type: "string", default: "20" },
  },
  allowPositionals: true,
})

// Server plays the server's side of the connection: it names itself with
// the metadata it is given and counts what the Repo sends it.
class Server extends NetworkAdapter {
  sent = 0
  constructor(metadata) {
    super()
    this.metadata = metadata
  }
  isReady() { return true }
  whenReady() { return Promise.resolve() }
  connect(peerId) {
    this.peerId = peerId
    queueMicrotask(() => this.emit("peer-candidate", { peerId: "server", peerMetadata: this.metadata }))
  }
  send() { this.sent++ }
  disconnect() {}
}

const turn = () => new Promise(r => setImmediate(r))

// replay feeds each reader's messages to a Repo of its own, one at a
// time, each once the Repo has answered the one before. The messages come
// faster than the Repo's 100 ms throttle, so the sync it makes after a
// change (one more generateSyncMessage a message in a live run, and with
// a storageId one more encoding of the heads) mostly does not run here:
// a live client spends a little more a message than this. It returns the
// CPU of the window's messages in µs, their count, and the Repos' replies
// to them.
async function replay(readers, metadata) {
  let cpu = 0, n = 0, replies = 0
  for (const messages of readers) {
    const server = new Server(metadata)
    const repo = new Repo({ network: [server] })
    await turn()
    const url = generateAutomergeUrl()
    const documentId = url.slice("automerge:".length)
    repo.find(url).catch(() => {})
    await turn()
    let before
    for (const m of messages) {
      if (m.window && before === undefined) before = server.sent
      const at = process.cpuUsage()
      server.emit("message", { type: m.type, senderId: "server", targetId: repo.peerId, documentId, data: new Uint8Array(Buffer.from(m.data, "base64")) })
      await turn()
      const used = process.cpuUsage(at)
      if (m.window) {
        cpu += used.user + used.system
        n++
      }
    }
    replies += server.sent - (before ?? server.sent)
    await repo.shutdown()
  }
  return { cpu, n, replies }
}

const announcements = { "a storageId": { storageId: "replayed-storage", isEphemeral: false }, "no storageId": { isEphemeral: true } }
const recorded = files.map(f => [f, JSON.parse(readFileSync(f, "utf8")).readers.slice(0, Number(opt.readers))])
const costs = {}
for (let round = 0; round < Number(opt.rounds); round++) {
  for (const [f, readers] of recorded) {
    for (const [said, metadata] of Object.entries(announcements)) {
      const r = await replay(readers, metadata)
      if (round >= 2) (costs[`${f}, ${said}`] ??= { perMessage: [], n: r.n, replies: r.replies }).perMessage.push(r.cpu / r.n)
    }
  }
}
for (const [k, c] of Object.entries(costs)) {
  c.perMessage.sort((a, b) => a - b)
  console.log(`${k}: ${c.n} messages, ${c.replies} replies; a message ${c.perMessage[0].toFixed(0)} µs (min), ${c.perMessage[c.perMessage.length >> 1].toFixed(0)} µs (median)`)
}
process.exit(0)
