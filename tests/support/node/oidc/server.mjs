// A real OpenID Provider (npm oidc-provider) on 127.0.0.1:$PORT for the OAuth tests (F16, C1).
//
// Environment (set by tests/support/oidc.py):
//   PORT            the port to listen on (the issuer is http://127.0.0.1:$PORT)
//   OIDC_JWKS       {"keys": [<private JWK>]}: the signing keys (the tests keep the public half)
//   OIDC_ACCOUNTS   {"alice": {"password": ..., "email": ..., "name": ..., "org_id": ...}, ...}
//   OIDC_SCOPES     the scopes a resource server grants (space-separated, default "toolgate")
//   OIDC_CLIENTS    optional [<client metadata>]: clients registered up front (the console)
//
// Dynamic client registration is open; resource indicators (RFC 8707) are on, so an access
// token is a JWT (RFC 9068) whose `aud` is the resource the client asked for. The login page is
// a plain form (user name + password); consent is given for the client on login.
import http from 'node:http';
import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS || '{}');
const resourceScopes = process.env.OIDC_SCOPES || 'toolgate';

function account(accountId) {
  const known = accounts[accountId];
  if (!known) return undefined;
  return {
    accountId,
    async claims() {
      return { sub: accountId, email: known.email, email_verified: true, name: known.name, org_id: known.org_id };
    },
  };
}

const provider = new Provider(issuer, {
  jwks: JSON.parse(process.env.OIDC_JWKS),
  clients: JSON.parse(process.env.OIDC_CLIENTS || '[]'),
  cookies: { keys: ['toolgate-test-cookie-key'] },
  findAccount: (ctx, id) => account(id),
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], org: ['org_id'] },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'org', ...resourceScopes.split(' ')],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope: resourceScopes,
        accessTokenTTL: 600,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  // who the token is for, as the gateway maps it to an identity (G3)
  extraTokenClaims: async (ctx, token) => {
    const known = token.accountId && accounts[token.accountId];
    return known ? { email: known.email, name: known.name, org_id: known.org_id } : undefined;
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  renderError: (ctx, out) => {
    ctx.type = 'text/plain';
    ctx.body = `${out.error}: ${out.error_description || ''}`;
  },
});

function page(uid, message) {
  return `<!doctype html><html><head><title>Sign in</title></head><body>
<h1>Sign in to the test issuer</h1>${message ? `<p id="error">${message}</p>` : ''}
<form method="post" action="/interaction/${uid}/login">
<label>User <input name="login" id="login" autocomplete="username"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit" id="submit">Sign in</button></form></body></html>`;
}

async function formOf(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

async function grantConsent(req, res, details) {
  const { prompt, params, session } = details;
  const grant = prompt.details.grantId
    ? await provider.Grant.find(prompt.details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

async function interaction(req, res, uid, login) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'consent') {
    await grantConsent(req, res, details);
    return;
  }
  if (!login || req.method !== 'POST') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(page(uid, ''));
    return;
  }
  const form = await formOf(req);
  const name = form.get('login') || '';
  const known = accounts[name];
  if (!known || known.password !== form.get('password')) {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(page(uid, 'Unknown user or wrong password.'));
    return;
  }
  await provider.interactionFinished(req, res, { login: { accountId: name } }, { mergeWithLastSubmission: false });
}

const callback = provider.callback();
const server = http.createServer((req, res) => {
  const match = new URL(req.url, issuer).pathname.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (!match) {
    callback(req, res);
    return;
  }
  interaction(req, res, match[1], Boolean(match[2])).catch((err) => {
    res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(`interaction failed: ${err.message}`);
  });
});
server.listen(port, '127.0.0.1', () => console.error(`oidc-provider listening on ${issuer}`));
