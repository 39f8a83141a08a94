// Stock automerge-repo clients for the end-to-end tests.
import { Repo } from "@automerge/automerge-repo"
import * as A from "@automerge/automerge"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import { defer, until } from "./server.mjs"

// client returns a stock Repo syncing through url. close() shuts it down
// once; the test's end does it for clients still open.
export function client(t, url) {
  const repo = new Repo({ network: [new WebSocketClientAdapter(url)] })
  let open = true
  repo.close = () => { if (open) { open = false; return repo.shutdown() } }
  defer(t, () => repo.close())
  return repo
}

// connected resolves once the repo has the server as a peer.
export async function connected(repo) {
  await until("the server peer", () => repo.peers.length > 0)
  return repo
}

// watchStatuses opens a contact list (the Server-Sent Events stream of
// /api/presence/watch) and returns the array its events are pushed into,
// as parsed JSON, and the response. The stream ends with the test.
export function watchStatuses(t, httpBase, users) {
  return streamEvents(t, `${httpBase}/api/presence/watch?users=${users.join(",")}`, {}, e => e.data)
}

// streamEvents reads a Server-Sent Events stream into an array of
// {event, id, data (parsed JSON), at}, each passed through keep first.
// The stream ends with the test.
export async function streamEvents(t, url, headers = {}, keep = e => e) {
  const controller = new AbortController()
  defer(t, () => controller.abort())
  const res = await fetch(url, { signal: controller.signal, headers })
  const events = []
  if (!res.ok) return { events, res }
  ;(async () => {
    const decoder = new TextDecoder()
    let buf = ""
    try {
      for await (const chunk of res.body) {
        buf += decoder.decode(chunk, { stream: true })
        let i
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i).split("\n")
          buf = buf.slice(i + 2)
          const field = name => block.find(l => l.startsWith(name + ": "))?.slice(name.length + 2)
          const data = field("data")
          if (data) events.push(keep({ event: field("event") ?? "message", id: field("id"), data: JSON.parse(data), at: Date.now() }))
        }
      }
    } catch { /* aborted at the end of the test */ }
  })()
  return { events, res }
}

// typeTogether has every handle type ten characters into its text at once,
// the i-th handle the digit i, and resolves when all hold the same text.
export async function typeTogether(handles) {
  for (let round = 0; round < 10; round++) {
    handles.forEach((h, i) => h.change(d => A.splice(d, ["text"], 0, 0, String(i))))
  }
  await until("all converge", () => {
    const texts = handles.map(h => h.doc().text)
    return texts[0].length === 10 * handles.length && texts.every(x => x === texts[0])
  }, 20000)
}
