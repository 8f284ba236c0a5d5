# Sourced by the deps/ recipes: fetch_from_pool <pool-path> <sha256> downloads a file of the
# Debian archive that the machine's apt sources name (no host is written in this repository)
# into $CACHE, once, and checks its sha256. Needs $CACHE and a say() function.

# The first Debian archive URI of the machine's apt configuration (deb822 or one-line format).
debian_mirror() {
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
    case "$uri" in */debian) echo "$uri"; return 0 ;; esac
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' "$f")
    case "$uri" in */debian) echo "$uri"; return 0 ;; esac
  done
  return 1
}

fetch_from_pool() {
  pool_path=$1
  sum=$2
  file="$CACHE/$(basename "$pool_path")"
  if [ -f "$file" ] && echo "$sum  $file" | sha256sum -c --quiet 2>/dev/null; then
    return 0
  fi
  mirror=$(debian_mirror) || { say "no Debian archive in the apt sources"; exit 1; }
  say "fetching $(basename "$pool_path")"
  tmp="$file.part"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$tmp" "$mirror/$pool_path"
  else
    wget -q -O "$tmp" "$mirror/$pool_path"
  fi
  if ! echo "$sum  $tmp" | sha256sum -c --quiet; then
    say "checksum mismatch for $(basename "$pool_path")"
    rm -f "$tmp"
    exit 1
  fi
  mv "$tmp" "$file"
}
