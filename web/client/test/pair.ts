// An in-memory network between two repos, for presence tests without a server.
import { NetworkAdapter, Repo } from "@automerge/automerge-repo"
import type { Message, PeerId, PeerMetadata, StorageId } from "@automerge/automerge-repo"

class PairAdapter extends NetworkAdapter {
  other!: PairAdapter
  storageId: StorageId | undefined
  isReady() {
    return true
  }
  whenReady() {
    return Promise.resolve()
  }
  connect(peerId: PeerId, peerMetadata?: PeerMetadata) {
    this.peerId = peerId
    this.peerMetadata = peerMetadata
    if (this.other.peerId) {
      this.emit("peer-candidate", { peerId: this.other.peerId, peerMetadata: this.other.metadata() })
      this.other.emit("peer-candidate", { peerId, peerMetadata: this.metadata() })
    }
  }
  send(message: Message) {
    queueMicrotask(() => this.other.emit("message", message))
  }
  disconnect() {
    this.emit("peer-disconnected", { peerId: this.other.peerId! })
  }
  // What this side announces: a storage id, if it has one (a server's,
  // which gives the other side's handles its remote heads).
  metadata(): PeerMetadata {
    return this.storageId ? { storageId: this.storageId, isEphemeral: false } : {}
  }
}

/**
 * Two repos that talk to each other directly. With bStorageId the second
 * announces a storage id, as a Tandem server does, so that the first's
 * handles get its remote heads.
 */
export function pair(bStorageId?: string): [Repo, Repo] {
  const a = new PairAdapter()
  const b = new PairAdapter()
  a.other = b
  b.other = a
  b.storageId = bStorageId as StorageId | undefined
  return [new Repo({ network: [a], peerId: "a" as PeerId }), new Repo({ network: [b], peerId: "b" as PeerId })]
}

/** Resolves at the first event for which cond is true. */
export function waitFor<T extends unknown[]>(
  on: (listener: (...args: T) => void) => () => void,
  cond: (...args: T) => boolean,
): Promise<T> {
  return new Promise(resolve => {
    const off = on((...args) => {
      if (cond(...args)) {
        off()
        resolve(args)
      }
    })
  })
}
