--[[
hpcpredict job_submit plugin for SLURM (JobSubmitPlugins=lua; install beside slurm.conf).

At each submission with a time limit, asks the hpcpredict daemon (its Unix socket, line protocol
of docs/protocol.md) for a runtime prediction and, in "lower" mode, lowers the job's time limit
to it: whole minutes, at least 1, never above the user's request. The request and the prediction
are kept in admin_comment ("hpcpredict:request_s=N,prediction_s=P,mode=M,procs=C,token=T"),
which users cannot set, so the corrector can raise the limit again up to the request and nothing
is lost; the processors C and the daemon's token T let the job learn from exactly the features
this prediction was computed from. When the
daemon answers lower=0 (its starvation guard is on), the limit is kept and the daemon lowers it
later, once the guard is off (the mode in the mark says it may).

It FAILS OPEN: no time limit, daemon down or slow (total timeout below), an answer that is not a
prediction, any Lua error -> the job passes untouched and the reason goes to slurmctld's log.
A daemon whose model is not ready (too few jobs learned, or a history too old) answers with the
request and ready=0: the limit is kept, the reason logged (an answer without `ready`, from an
older daemon, is acted on as before).
The plugin runs while slurmctld holds its locks: keep the timeout small.

Needs hpcpredict_common.lua beside it (the socket exchange and the settings it shares with
jobcomp.lua); without it every job passes untouched and slurmctld's log says why.
Settings: key=value lines in hpcpredict_slurm.conf in the directory of this script (read once per
load; slurmctld reloads the script when it changes):
  socket=/run/hpcpredict/hpcpredict.sock
  timeout_ms=300
  mode=lower            (lower: lower the kill limit; record: only record the prediction)
  enabled=1             (0: pass every job untouched, e.g. while the daemon is being replaced)
]]

local HERE = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local loaded, common = pcall(dofile, HERE .. "hpcpredict_common.lua")
local SETTINGS = loaded and common.read_settings(HERE, slurm.log_error) or nil

-- Processors the job asks for: min_cpus when set, else tasks x cpus per task, else 1.
local function requested_cpus(job_desc)
	local min_cpus = common.positive(job_desc.min_cpus)
	if min_cpus then
		return min_cpus
	end
	return (common.positive(job_desc.num_tasks) or 1) * (common.positive(job_desc.cpus_per_task) or 1)
end

-- The daemon's prediction in seconds and its answer's fields, or nil and why not.
local function ask_daemon(request)
	local answer, why = common.exchange(SETTINGS, request)
	if not answer then
		return nil, why
	end
	local status, fields = common.parse_answer(answer)
	local digits = status == "OK" and fields.prediction and fields.prediction:match("^%d+$")
	local seconds = digits and tonumber(digits)
	if not seconds then
		return nil, "unexpected answer: " .. answer:sub(1, 200)
	end
	return seconds, fields
end

local function predict_and_apply(job_desc, submit_uid)
	if SETTINGS.enabled ~= "1" then
		return "disabled"
	end
	local limit_min = common.positive(job_desc.time_limit)
	if not limit_min then
		return "no time limit: untouched"
	end
	-- the job's owner: root (or SlurmUser) submitting for a user with sbatch --uid is submit_uid,
	-- and job_desc.user_id is the user the job runs as and is learned for
	local uid = common.number(job_desc.user_id) or submit_uid
	local cpus = requested_cpus(job_desc)
	local request = string.format("PREDICT uid=%d procs=%d time_limit=%d", uid, cpus, limit_min * 60)
	if job_desc.partition then
		request = request .. " partition=" .. common.encode(job_desc.partition)
	end
	if job_desc.name then
		request = request .. " name=" .. common.encode(job_desc.name)
	end
	if common.positive(job_desc.group_id) then
		request = request .. string.format(" gid=%d", job_desc.group_id)
	end
	local seconds, fields = ask_daemon(request .. "\n")
	if not seconds then
		return fields .. ": untouched"
	end
	local minutes = math.max(1, math.min(limit_min, math.ceil(seconds / 60)))
	-- procs: the count predicted for, which the watcher and jobcomp.lua report whatever SLURM
	-- allocates; token: the daemon's key to the features of this prediction (docs/protocol.md)
	local tag = string.format("%srequest_s=%d,prediction_s=%d,mode=%s,procs=%d", common.TAG, limit_min * 60, seconds,
		SETTINGS.mode == "lower" and "lower" or "record", cpus)
	local token = common.token(fields.token)
	if token then
		tag = tag .. ",token=" .. token
	end
	local previous = job_desc.admin_comment
	if previous and previous ~= "" then
		job_desc.admin_comment = tag .. " " .. previous
	else
		job_desc.admin_comment = tag
	end
	if fields.ready == "0" then
		-- not ready (too few jobs learned, or a stale history): the prediction is the request
		return string.format("prediction %d s recorded, limit %d min kept (daemon not ready: %s)", seconds, limit_min, fields.reason or "?")
	end
	if SETTINGS.mode == "lower" and fields.lower == "0" then
		-- the daemon holds lowering (its starvation guard is on): the mark lets it lower later
		return string.format("prediction %d s recorded, limit %d min kept (daemon: %s)", seconds, limit_min,
			fields.hold or "hold")
	end
	if SETTINGS.mode == "lower" and minutes < limit_min then
		job_desc.time_limit = minutes
		return string.format("time limit %d -> %d min (prediction %d s)", limit_min, minutes, seconds)
	end
	return string.format("prediction %d s recorded, limit %d min kept (%s mode)", seconds, limit_min, SETTINGS.mode)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if not loaded then
		slurm.log_error("hpcpredict: job untouched: cannot load %shpcpredict_common.lua: %s", HERE, tostring(common))
		return slurm.SUCCESS
	end
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

if loaded and SETTINGS.enabled ~= "1" then
	-- never "mode lower" in the log of a plugin that lowers nothing (turning it off, docs/quickstart-cluster.md)
	slurm.log_info("hpcpredict: job_submit.lua loaded, disabled (enabled=%s): every job passes untouched", SETTINGS.enabled)
elseif loaded then
	slurm.log_info("hpcpredict: job_submit.lua loaded (mode %s, socket %s, timeout %d ms)", SETTINGS.mode, SETTINGS.socket, SETTINGS.timeout_s * 1000)
else
	slurm.log_error("hpcpredict: job_submit.lua: cannot load %shpcpredict_common.lua (%s): every job passes untouched", HERE, tostring(common))
end
return slurm.SUCCESS
