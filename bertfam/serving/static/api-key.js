// a service started with --api-key answers 401: ask for the key once, keep it for this tab only
function withKey(opts) {
  const key = sessionStorage.getItem("bertfam-api-key");
  return {...opts, headers: {...(opts.headers || {}), ...(key ? {"Authorization": "Bearer " + key} : {})}};
}
async function call(path, opts) {
  let r = await fetch(path, withKey(opts || {}));
  if (r.status === 401) {
    const key = prompt("API key (bertfam serve --api-key)");
    if (key) { sessionStorage.setItem("bertfam-api-key", key.trim()); r = await fetch(path, withKey(opts || {})); }
  }
  return r;
}
