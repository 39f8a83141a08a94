// Stock automerge-repo clients for the end-to-end tests.
import { Repo } from "@automerge/automerge-repo"
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

// findDoc opens a document another client has just created. If that
// client's first sync has not reached the server yet (or, in a cluster,
// this node), a stock client is told the document is unavailable, then
// receives it as soon as the server has it.
export async function findDoc(repo, url) {
  try {
    return await repo.find(url)
  } catch {
    const handle = repo.findWithProgress(url).handle
    await handle.whenReady()
    return handle
  }
}
