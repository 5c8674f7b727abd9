// Preload (node --import ./listen-host.mjs): a port-only listen() binds 127.0.0.1, not every
// interface, so the servers the tests start are reachable on loopback only.
import net from 'node:net';

const origListen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const portOnly =
    (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) &&
    (args.length === 1 || typeof args[1] === 'function');
  if (portOnly) {
    args.splice(1, 0, '127.0.0.1');
  }
  return origListen.apply(this, args);
};
