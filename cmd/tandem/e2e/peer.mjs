// A stock automerge-repo peer in its own process, for tests that freeze
// it (SIGSTOP). Usage: node peer.mjs <ws url> <automerge url> <state JSON>
// It prints its peer id once its Presence has started, then stays alive.
import { Repo, Presence } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"

const [url, docUrl, state] = process.argv.slice(2)
const repo = new Repo({ network: [new WebSocketClientAdapter(url)] })
const handle = await repo.find(docUrl)
const presence = new Presence({ handle })
presence.start({ initialState: JSON.parse(state) })
console.log(repo.peerId)
