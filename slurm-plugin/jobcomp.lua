--[[
hpcpredict job completion script for SLURM (JobCompType=jobcomp/lua; install beside slurm.conf
as jobcomp.lua). Reports every finished job to the hpcpredict daemon so the model learns from its
true runtime; when the daemon cannot be reached it appends the report to a spool file that the
daemon ingests when it starts (and at every poll), so no finished job is lost.

The report is one END line of the daemon's protocol (docs/protocol.md) carrying the whole job,
so the daemon can learn from jobs it never saw submitted. The time limit reported is the user's
original request when job_submit.lua marked the job (admin_comment), and the job is flagged
lowered_kill=1 when SLURM killed it at a limit below that request (its runtime is then only a
lower bound: hpcpredict/daemon/core/learning.py decides what is learned from it). The mark's
prediction and token go with it: for a job whose submission the daemon never saw, they let it
record the submission as the plugin's PREDICT served it.

Needs hpcpredict_common.lua beside it. Settings: hpcpredict_slurm.conf beside this script (the
same file as job_submit.lua's; see hpcpredict_common.lua):
  socket=/run/hpcpredict/hpcpredict.sock
  timeout_ms=300
  spool=/var/lib/hpcpredict/jobcomp.spool
]]

local HERE = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local loaded, common = pcall(dofile, HERE .. "hpcpredict_common.lua")
local SETTINGS = loaded and common.read_settings(HERE, nil) or nil
local JOB_TIMEOUT = 6 -- enum job_states: 3 complete, 4 cancelled, 5 failed, 6 timeout, ...
local STATE_NAMES = {
	[3] = "COMPLETED", [4] = "CANCELLED", [5] = "FAILED", [6] = "TIMEOUT", [7] = "NODE_FAIL",
	[8] = "PREEMPTED", [9] = "BOOT_FAIL", [10] = "DEADLINE", [11] = "OUT_OF_MEMORY",
}

local number = loaded and common.number or tonumber
-- The limit SLURM's backfill scheduler gives a job submitted without one, in a partition with no
-- MaxTime, when it starts it (a year, YEAR_MINUTES); the main scheduler leaves the same job
-- UNLIMITED. No user asked for it: without the plugin's mark it is no request
-- (hpcpredict/slurm/tag.py, BACKFILL_NO_LIMIT_S).
local BACKFILL_NO_LIMIT_MIN = 365 * 24 * 60

local function report_line(job)
	local state_code = (number(job.job_state) or 0) % 256
	local start_s = number(job.start_time) or 0
	local end_s = number(job.end_time) or 0
	local run_s = 0
	if start_s > 0 and end_s >= start_s then
		run_s = end_s - start_s
	end
	local limit_s = (number(job.time_limit) or 0) * 60
	local comment = job.admin_comment or ""
	local request_s = tonumber(comment:match("hpcpredict:request_s=(%d+)"))
	local lowered_kill = 0
	if request_s and state_code == JOB_TIMEOUT and limit_s > 0 and limit_s < request_s then
		lowered_kill = 1
	end
	local requested = request_s or limit_s
	if not request_s and limit_s == BACKFILL_NO_LIMIT_MIN * 60 then
		requested = 0 -- no time_limit sent: the daemon acknowledges the job and does not record it
	end
	-- the processors the plugin predicted for (its mark), else SLURM's count: docs/protocol.md
	local procs = tonumber(comment:match("hpcpredict:[^ ]*,procs=(%d+)")) or math.max(1, number(job.total_cpus) or 1)
	local line = string.format(
		"END job=%d uid=%d procs=%d submit=%d start=%d end=%d run=%d state=%s lowered_kill=%d",
		job.job_id, job.user_id, procs,
		number(job.submit_time) or start_s, start_s, end_s, run_s,
		STATE_NAMES[state_code] or tostring(state_code), lowered_kill)
	if requested > 0 then
		line = line .. string.format(" time_limit=%d", requested)
	end
	-- what the mark says of the prediction: the daemon uses them only for a job whose submission
	-- it never saw (its whole life between two looks of the watcher), so that the job learns from
	-- the features its prediction was computed from (docs/protocol.md, END)
	local predicted = tonumber(comment:match("hpcpredict:request_s=%d+,prediction_s=(%d+)"))
	if predicted and predicted > 0 and predicted <= requested then -- never above the request
		line = line .. string.format(" predicted=%d", predicted)
	end
	local token = common.token(comment:match("hpcpredict:[^ ]*,token=([^, ]*)"))
	if token then
		line = line .. " token=" .. token
	end
	if number(job.group_id) then
		line = line .. string.format(" gid=%d", job.group_id)
	end
	if job.partition then
		line = line .. " partition=" .. common.encode(job.partition)
	end
	return line .. "\n"
end

local function send(line)
	local answer, why = common.exchange(SETTINGS, line)
	if not answer then
		return false, why
	end
	local status, fields = common.parse_answer(answer)
	if status == "OK" then
		return true
	end
	if status == "ERR" and (fields.code == "bad_request" or fields.code == "missing_field") then
		return true, answer -- would be refused again from the spool: log it, do not keep it
	end
	return false, answer
end

local function spool(line)
	local file, err = io.open(SETTINGS.spool, "a")
	if not file then
		return false, err
	end
	file:write(line)
	file:close()
	return true
end

local function report(job)
	local line = report_line(job)
	local sent, why = send(line)
	if sent then
		if why then
			slurm.log_error("hpcpredict: job %d: daemon refused the report: %s", job.job_id, why)
		end
		return
	end
	local spooled, err = spool(line)
	if spooled then
		slurm.log_info("hpcpredict: job %d: daemon unreachable (%s), report spooled to %s", job.job_id, why, SETTINGS.spool)
	else
		slurm.log_error("hpcpredict: job %d: daemon unreachable (%s) and spool %s failed: %s", job.job_id, why, SETTINGS.spool, tostring(err))
	end
end

function slurm_jobcomp_log_record(job)
	if not loaded then
		slurm.log_error("hpcpredict: job %s not reported: cannot load %shpcpredict_common.lua: %s", tostring(job.job_id), HERE, tostring(common))
		return slurm.SUCCESS
	end
	local ok, err = pcall(report, job)
	if not ok then
		slurm.log_error("hpcpredict: job completion report failed: %s", tostring(err))
	end
	return slurm.SUCCESS
end

return slurm.SUCCESS
