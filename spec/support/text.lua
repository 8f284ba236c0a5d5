-- text(n, seed): n bytes that differ from one seed to the next and along the string (every byte
-- value occurs), for specs that check long strings arrive byte for byte.
return function(n, seed)
  local parts = {}
  for i = 1, math.ceil(n / 4) do
    parts[i] = string.char((i + seed) % 256, (i * 7) % 256, (i * 13 + seed) % 256, i % 251)
  end
  return table.concat(parts):sub(1, n)
end
