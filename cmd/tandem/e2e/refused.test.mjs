// End-to-end: a stock client whose change the node refuses (a paste over
// --max-change-bytes) loses that document on its connection, not the
// connection: it is told why, its other documents go on syncing both
// ways, and it does not reconnect (a closed stock client reconnects every
// 5 s and sends the change again).
import { test } from "node:test"
import assert from "node:assert/strict"
import { Repo, cbor } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import { defer, start, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"

// watchedClient is a stock Repo whose adapter's incoming messages are
// watched: the server's errors, and its peer messages (one per
// connection: the answer to each join).
function watchedClient(t, url) {
  const adapter = new WebSocketClientAdapter(url)
  const seen = { errors: [], peers: 0 }
  const receive = adapter.receiveMessage.bind(adapter)
  adapter.receiveMessage = bytes => {
    const m = cbor.decode(new Uint8Array(bytes))
    if (m.type === "error") seen.errors.push(m.message)
    if (m.type === "peer") seen.peers++
    return receive(bytes)
  }
  const repo = new Repo({ network: [adapter] })
  defer(t, () => repo.shutdown())
  return { repo, seen }
}

async function metric(node, name, labels) {
  const text = await (await fetch(`${node.http}/metrics`)).text()
  const line = text.split("\n").find(l => l.startsWith(`${name}{${labels}}`))
  return line ? Number(line.split(" ")[1]) : 0
}

test("a change over the limit costs the stock client that document, not its connection", async t => {
  const node = await start(t, { args: ["--max-change-bytes", "16000"] })
  const { repo: a, seen } = watchedClient(t, node.url)
  await connected(a)
  const docA = a.create({ text: "" })
  const docB = a.create({ text: "" })
  const b = await connected(client(t, node.url))
  const [seenA, seenB] = await Promise.all([b.find(docA.url), b.find(docB.url)])

  docA.change(d => { d.text = "x".repeat(5000) }) // a paste of 5,000 operations: over 80,000 bytes
  docB.change(d => { d.text = "typed after the paste" })
  await until("b gets a's edit of B", () => seenB.doc().text === "typed after the paste")
  seenB.change(d => { d.reply = "from b" })
  await until("a gets b's edit of B", () => docB.doc().reply === "from b")
  // The client sends the paste as a change or, since it is more than a
  // third of the document, as the whole document saved: either is refused
  // past the limits the flag sets, and the error names the document.
  await until("a is told its change to A was refused", () => seen.errors.some(e => e.includes(docA.documentId) && e.includes("refused") && e.includes("over")))

  assert.equal(seen.peers, 1, "the client reconnected: its connection was closed")
  assert.equal(await metric(node, "tandem_disconnects_total", 'reason="document_limit"'), 0)
  assert.equal(await metric(node, "tandem_documents_refused_total", 'reason="document_limit"'), 1)
  assert.equal(seenA.doc().text, "", "the refused paste reached another peer")
})
