// End-to-end: a writer sends a change built by hand whose ops name things
// the document lacks. automerge-go would apply it and every stock client
// would then fail on the document for good (and a compacted snapshot of
// it would no longer load). The node refuses it with an error naming the
// document; stock clients keep editing, a new one finds the document, and
// after a restart it still loads.
import { test } from "node:test"
import assert from "node:assert/strict"
import * as A from "@automerge/automerge"
import { cbor } from "@automerge/automerge-repo"
import WebSocket from "ws"
import { start, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"

// forgedChanges returns changes made on a copy of doc and then rewritten
// so that each names something doc lacks.
function forgedChanges(doc) {
  const actor = "f0f0f0f0f0f0f0f0"
  const base = A.clone(doc, { actor })
  const made = A.change(base, d => { A.splice(d, ["text"], 0, 0, "x") })
  const honest = A.decodeChange(A.getLastLocalChange(made))
  const forge = edit => {
    const c = structuredClone(honest)
    edit(c.ops[0])
    delete c.hash
    return A.encodeChange(c)
  }
  return {
    "an object never made": forge(op => { op.obj = `99@${actor}` }),
    "an element that does not exist": forge(op => { op.elemId = `77@${actor}` }),
    "a missing predecessor": forge(op => { op.insert = false; op.pred = [`55@${actor}`] }),
  }
}

// rawWriter is a bare WebSocket peer that joins and sends sync messages.
async function rawWriter(t, url) {
  const ws = new WebSocket(url)
  t.after(() => ws.close())
  const seen = { errors: [], closed: null }
  let server
  ws.on("message", data => {
    const m = cbor.decode(new Uint8Array(data))
    if (m.type === "peer") server = m.senderId
    if (m.type === "error") seen.errors.push(m.message)
  })
  ws.on("close", code => { seen.closed = code })
  await new Promise(r => ws.on("open", r))
  ws.send(cbor.encode({ type: "join", senderId: "mallory", peerMetadata: { isEphemeral: false }, supportedProtocolVersions: ["1"] }))
  await until("the server's peer message", () => server)
  const send = (documentId, change) => {
    // A sync message: no heads, need or have; one change.
    const len = []
    for (let n = change.length; ; n >>>= 7) {
      if (n < 0x80) { len.push(n); break }
      len.push((n & 0x7f) | 0x80)
    }
    const data = new Uint8Array([0x42, 0, 0, 0, 1, ...len, ...change])
    ws.send(cbor.encode({ type: "sync", senderId: "mallory", targetId: server, documentId, data }))
  }
  return { seen, send }
}

test("a forged change is refused, and stock clients keep the document", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const handle = a.create({ text: "hello" })
  const b = await connected(client(t, node.url))
  const seenB = await b.find(handle.url)
  assert.equal(seenB.doc().text, "hello")

  const forged = forgedChanges(handle.doc())
  for (const [name, change] of Object.entries(forged)) {
    const m = await rawWriter(t, node.url)
    m.send(handle.documentId, change)
    await until(`an error for ${name}`, () => m.seen.errors.some(e => e.includes(handle.documentId)))
    assert.equal(m.seen.closed, null, `${name}: the writer's connection was closed`)
  }

  // The honest clients go on, and a new one finds the document.
  handle.change(d => { A.splice(d, ["text"], 5, 0, ", world") })
  await until("b gets a's edit", () => seenB.doc().text === "hello, world")
  const c = await connected(client(t, node.url))
  const seenC = await c.find(handle.url)
  assert.equal(seenC.doc().text, "hello, world")

  // After a restart the stored document loads for a fresh client.
  await a.close()
  await b.close()
  await c.close()
  await node.kill("SIGTERM")
  const again = await start(t, { dataDir: node.dataDir })
  const d = await connected(client(t, again.url))
  const seenD = await d.find(handle.url)
  assert.equal(seenD.doc().text, "hello, world")
})
