--[[
hpcpredict job_submit plugin for SLURM (JobSubmitPlugins=lua; install beside slurm.conf).

At each submission with a time limit, asks the hpcpredict daemon (its Unix socket, line protocol
of docs/protocol.md) for a runtime prediction and, in "lower" mode, lowers the job's time limit
to it: whole minutes, at least 1, never above the user's request. The request and the prediction
are kept in admin_comment ("hpcpredict:request_s=N,prediction_s=P"), which users cannot set, so
the corrector can raise the limit again up to the request and nothing is lost.

It FAILS OPEN: no time limit, daemon down or slow (total timeout below), an answer that is not a
prediction, any Lua error -> the job passes untouched and the reason goes to slurmctld's log.
The plugin runs while slurmctld holds its locks: keep the timeout small.

Settings: edit the defaults below, or put key=value lines in hpcpredict_slurm.conf in the
directory of this script (read once per load; slurmctld reloads the script when it changes):
  socket=/run/hpcpredict/hpcpredict.sock
  timeout_ms=300
  mode=lower            (lower: lower the kill limit; record: only record the prediction)
  enabled=1             (0: pass every job untouched, e.g. while the daemon is being replaced)
]]

local DEFAULTS = {
	socket = "/run/hpcpredict/hpcpredict.sock",
	timeout_ms = "300",
	mode = "lower",
	enabled = "1",
	spool = "/var/spool/hpcpredict/jobcomp.spool", -- used by jobcomp.lua (same file of settings)
}
local TAG = "hpcpredict:"

local function script_dir()
	local source = debug.getinfo(1, "S").source
	return source:match("^@(.*/)") or "./"
end

local function read_settings()
	local settings = {}
	for key, value in pairs(DEFAULTS) do
		settings[key] = value
	end
	local path = script_dir() .. "hpcpredict_slurm.conf"
	local file = io.open(path, "r")
	if file then
		for line in file:lines() do
			local key, value = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
			if key and DEFAULTS[key] then
				settings[key] = value
			elseif line:match("%S") and not line:match("^%s*#") then
				slurm.log_error("hpcpredict: %s: ignoring line %q", path, line)
			end
		end
		file:close()
	end
	settings.timeout_s = (tonumber(settings.timeout_ms) or 300) / 1000
	return settings
end

local SETTINGS = read_settings()
-- luasocket's Unix sockets: socket.unix() in 3.0, require("socket.unix").stream() in 3.1.
local unix_ok, unix = pcall(require, "socket.unix")

local function unix_stream()
	if type(unix) == "table" and unix.stream then
		return unix.stream()
	end
	return unix()
end

local function valid(value)
	return value ~= nil and value ~= slurm.NO_VAL and value ~= slurm.NO_VAL16
		and value ~= slurm.INFINITE and value > 0
end

local function encode(text)
	return (tostring(text):gsub("[^%w%-%._~]", function(c)
		return string.format("%%%02X", string.byte(c))
	end))
end

-- Processors the job asks for: min_cpus when set, else tasks x cpus per task, else 1.
local function requested_cpus(job_desc)
	if valid(job_desc.min_cpus) then
		return job_desc.min_cpus
	end
	local tasks = valid(job_desc.num_tasks) and job_desc.num_tasks or 1
	local per_task = valid(job_desc.cpus_per_task) and job_desc.cpus_per_task or 1
	return tasks * per_task
end

-- The daemon's prediction in seconds, or nil and why not.
local function ask_daemon(request)
	if not unix_ok then
		return nil, "luasocket with socket.unix is not installed"
	end
	local connection = unix_stream()
	connection:settimeout(SETTINGS.timeout_s, "t") -- total budget for the whole exchange
	local ok, err = connection:connect(SETTINGS.socket)
	if not ok then
		connection:close()
		return nil, "daemon unreachable at " .. SETTINGS.socket .. ": " .. tostring(err)
	end
	ok, err = connection:send(request)
	local line
	if ok then
		line, err = connection:receive("*l")
	end
	connection:close()
	if not line then
		return nil, "no answer from the daemon: " .. tostring(err)
	end
	local seconds = tonumber(line:match("^OK prediction=(%d+)"))
	if not seconds then
		return nil, "unexpected answer: " .. line:sub(1, 200)
	end
	return seconds
end

local function predict_and_apply(job_desc, submit_uid)
	if SETTINGS.enabled ~= "1" then
		return "disabled"
	end
	local limit_min = job_desc.time_limit
	if not valid(limit_min) then
		return "no time limit: untouched"
	end
	local uid = submit_uid or job_desc.user_id
	local request = string.format("PREDICT uid=%d procs=%d time_limit=%d", uid, requested_cpus(job_desc), limit_min * 60)
	if job_desc.partition then
		request = request .. " partition=" .. encode(job_desc.partition)
	end
	if job_desc.name then
		request = request .. " name=" .. encode(job_desc.name)
	end
	if valid(job_desc.group_id) then
		request = request .. string.format(" gid=%d", job_desc.group_id)
	end
	local seconds, why = ask_daemon(request .. "\n")
	if not seconds then
		return why .. ": untouched"
	end
	local minutes = math.max(1, math.min(limit_min, math.ceil(seconds / 60)))
	local tag = string.format("%srequest_s=%d,prediction_s=%d", TAG, limit_min * 60, seconds)
	local previous = job_desc.admin_comment
	if previous and previous ~= "" then
		job_desc.admin_comment = tag .. " " .. previous
	else
		job_desc.admin_comment = tag
	end
	if SETTINGS.mode == "lower" and minutes < limit_min then
		job_desc.time_limit = minutes
		return string.format("time limit %d -> %d min (prediction %d s)", limit_min, minutes, seconds)
	end
	return string.format("prediction %d s recorded, limit %d min kept (%s mode)", seconds, limit_min, SETTINGS.mode)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, outcome = pcall(predict_and_apply, job_desc, submit_uid)
	if ok then
		slurm.log_info("hpcpredict: uid %s: %s", tostring(submit_uid), outcome)
	else
		slurm.log_error("hpcpredict: uid %s: job untouched after an error: %s", tostring(submit_uid), tostring(outcome))
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

slurm.log_info("hpcpredict: job_submit.lua loaded (mode %s, socket %s, timeout %d ms)", SETTINGS.mode, SETTINGS.socket, SETTINGS.timeout_s * 1000)
return slurm.SUCCESS
