/** A minimal typed event emitter. */
export class Emitter<Events extends { [K in keyof Events]: (...args: never[]) => void }> {
  #listeners = new Map<keyof Events, Set<Events[keyof Events]>>()

  /** Adds a listener; returns the function that removes it. */
  on<K extends keyof Events>(event: K, listener: Events[K]): () => void {
    let set = this.#listeners.get(event)
    if (!set) this.#listeners.set(event, (set = new Set()))
    set.add(listener)
    return () => this.off(event, listener)
  }

  off<K extends keyof Events>(event: K, listener: Events[K]): void {
    this.#listeners.get(event)?.delete(listener)
  }

  protected emit<K extends keyof Events>(event: K, ...args: Parameters<Events[K]>): void {
    const set = this.#listeners.get(event)
    if (!set) return
    for (const l of [...set]) (l as (...a: Parameters<Events[K]>) => void)(...args)
  }
}
