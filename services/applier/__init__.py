"""The applier: server-side apply of intents from the shared durable consumer (DESIGN §6).

The only component that writes to the cluster. Built in the reconcile pipeline issue; this
package exists so the layout and import contracts hold from day one.
"""
