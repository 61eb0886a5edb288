--[[
What job_submit.lua and jobcomp.lua share: their settings file, one exchange with the hpcpredict
daemon over its Unix socket, and the protocol's encoding (docs/protocol.md). Install it beside
both scripts (beside slurm.conf); each loads it with dofile from its own directory, and fails open
(logs, leaves jobs untouched) when it is missing.

Settings: key=value lines in hpcpredict_slurm.conf in the same directory, read once per load:
  socket=/run/hpcpredict/hpcpredict.sock
  timeout_ms=300
  mode=lower            (job_submit.lua: lower the kill limit; record: only record the prediction)
  enabled=1             (job_submit.lua: 0 passes every job untouched)
  spool=/var/lib/hpcpredict/jobcomp.spool   (jobcomp.lua: reports kept while the daemon is down)
]]

local common = {}

common.DEFAULTS = {
	socket = "/run/hpcpredict/hpcpredict.sock",
	timeout_ms = "300",
	mode = "lower",
	enabled = "1",
	spool = "/var/lib/hpcpredict/jobcomp.spool",
}
common.TAG = "hpcpredict:" -- the admin_comment mark: hpcpredict:request_s=N,prediction_s=P,mode=M

-- SLURM's "no value" markers (NO_VAL, NO_VAL16, INFINITE...) are all near the top of their
-- unsigned range; a value at or above 0xFFFFFFFE, or a 16-bit 0xFFFE/0xFFFF, means "not set".
local NOT_SET = { [0xFFFE] = true, [0xFFFF] = true }

-- A number SLURM actually set (0 included: gid 0 is root's group), or nil.
function common.number(value)
	local n = tonumber(value)
	if n == nil or n >= 4294967294 or NOT_SET[n] then
		return nil
	end
	return n
end

-- A positive number SLURM actually set (a time limit, a count), or nil.
function common.positive(value)
	local n = common.number(value)
	if n == nil or n <= 0 then
		return nil
	end
	return n
end

-- The settings: defaults, overridden by hpcpredict_slurm.conf in `dir`; unknown lines are
-- reported through `log_error` (once per load) and ignored.
function common.read_settings(dir, log_error)
	local settings = {}
	for key, value in pairs(common.DEFAULTS) do
		settings[key] = value
	end
	local path = dir .. "hpcpredict_slurm.conf"
	local file = io.open(path, "r")
	if file then
		for line in file:lines() do
			local key, value = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
			if key and common.DEFAULTS[key] then
				settings[key] = value
			elseif line:match("%S") and not line:match("^%s*#") and log_error then
				log_error("hpcpredict: %s: ignoring line %q", path, line)
			end
		end
		file:close()
	end
	settings.timeout_s = (tonumber(settings.timeout_ms) or 300) / 1000
	return settings
end

-- luasocket's Unix sockets: socket.unix() in 3.0, require("socket.unix").stream() in 3.1.
local unix_ok, unix = pcall(require, "socket.unix")

local function unix_stream()
	if type(unix) == "table" and unix.stream then
		return unix.stream()
	end
	return unix()
end

-- Send one request line and read one answer line, within `settings.timeout_s` in all.
-- Returns the answer, or nil and why not.
function common.exchange(settings, line)
	if not unix_ok then
		return nil, "luasocket with socket.unix is not installed"
	end
	local connection = unix_stream()
	connection:settimeout(settings.timeout_s, "t") -- total budget for the whole exchange
	local ok, err = connection:connect(settings.socket)
	if not ok then
		connection:close()
		return nil, "daemon unreachable at " .. settings.socket .. ": " .. tostring(err)
	end
	ok, err = connection:send(line)
	local answer
	if ok then
		-- Nothing more will be sent: the daemon, seeing the request and the half-close together,
		-- answers as it accepts the connection, its cheapest path (docs/protocol.md).
		connection:shutdown("send")
		answer, err = connection:receive("*l")
	end
	connection:close()
	if not answer then
		return nil, "no answer from the daemon: " .. tostring(err)
	end
	return answer
end

-- An answer line as its status ("OK", "ERR") and its key=value fields, whatever their order.
-- ERR answers carry a code and a free-text message after the status: `code` holds the code.
function common.parse_answer(line)
	local status, rest = line:match("^(%u+)%s*(.*)$")
	if not status then
		return nil, {}
	end
	local fields = {}
	if status == "ERR" then
		fields.code = rest:match("^(%S+)")
		return status, fields
	end
	for key, value in rest:gmatch("([%w_]+)=(%S*)") do
		fields[key] = value
	end
	return status, fields
end

-- A feature token as PREDICT gives them (hex prefix, dash, hex counter, each at most 16
-- digits: docs/protocol.md), or nil: what the daemon would refuse never enters a mark or a report.
function common.token(value)
	local prefix, counter = (value or ""):match("^([0-9a-f]+)%-([0-9a-f]+)$")
	if prefix and #prefix <= 16 and #counter <= 16 then
		return value
	end
	return nil
end

-- Percent-encoding of a field value (the protocol's one escaping rule).
function common.encode(text)
	return (tostring(text):gsub("[^%w%-%._~]", function(c)
		return string.format("%%%02X", string.byte(c))
	end))
end

return common
