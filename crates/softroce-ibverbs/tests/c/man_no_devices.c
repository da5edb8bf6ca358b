/* ibv_get_device_list(3): "If no devices are found then num_devices is set to 0, and
 * non-NULL is returned." Run with SOFTROCE_DEVICES set and empty. Prints "N failures". */
#include "common.h"

int main(void)
{
	int n = -1;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list != NULL && n == 0 && list[0] == NULL, "list %p n %d errno %d", (void *)list,
	      n, errno);
	if (list)
		ibv_free_device_list(list);
	list = ibv_get_device_list(NULL);
	CHECK(list != NULL && list[0] == NULL, "without num_devices");
	if (list)
		ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
